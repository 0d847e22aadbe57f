package broker

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/posgate/posgate/internal/guard"
)

// TestGuessingWaits: after the free failures, an account waits before its next password is
// even checked (the right one included); an unknown user counts against the address; once
// the wait is over the right password logs in.
func TestGuessingWaits(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b, err := Start(Config{Addr: "127.0.0.1:0", Store: "S1",
		Users:  []User{mustUser(t, "t1", "p1-of-the-tests!", "T1")},
		Logins: guard.New(guard.Config{Free: 3, Base: time.Minute, Now: clock})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for i := range 4 {
		if _, err := connect(t, b, "tool", "t1", "a guess "+strings.Repeat("x", i)); err == nil {
			t.Fatal("a wrong password logged in")
		}
	}
	if _, err := connect(t, b, "posgate-S1-T1", "t1", "p1-of-the-tests!"); err == nil {
		t.Fatal("the right password logged in while the account waits after 4 wrong ones")
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if _, err := connect(t, b, "posgate-S1-T1", "t1", "p1-of-the-tests!"); err != nil {
		t.Fatalf("after the wait: %v", err)
	}
}

// TestUsersFile: store-server passwd's file round trip; a plain-text password, a short
// password, a second entry of a user and a hash that is not bcrypt are refused.
func TestUsersFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.json")
	u1, err := NewUser("t01", "a long enough password", "T01", bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveUser(path, u1); err != nil {
		t.Fatal(err)
	}
	u1b, _ := NewUser("t01", "another long password", "T01", bcrypt.MinCost)
	u2, _ := NewUser("t02", "the second till's password", "T02", bcrypt.MinCost)
	if err := SaveUser(path, u1b); err != nil {
		t.Fatal(err)
	}
	if err := SaveUser(path, u2); err != nil {
		t.Fatal(err)
	}
	users, err := LoadUsers(path)
	if err != nil || len(users) != 2 || users[0].PasswordHash != u1b.PasswordHash || users[1].Username != "t02" {
		t.Fatalf("users %+v, %v; want t01 replaced and t02 added", users, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("users file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	if _, err := NewUser("t03", "short", "T03", bcrypt.MinCost); err == nil {
		t.Error("a 5-byte password was taken")
	}
	for name, body := range map[string]string{
		"plain text": `[{"username":"t01","password":"a long enough password","terminal":"T01"}]`,
		"not bcrypt": `[{"username":"t01","password_hash":"5f4dcc3b5aa765d61d8327deb882cf99","terminal":"T01"}]`,
		"twice":      `[{"username":"t01","password_hash":"` + u1.PasswordHash + `","terminal":"T01"},{"username":"t01","password_hash":"` + u1.PasswordHash + `","terminal":"T02"}]`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := LoadUsers(p); err == nil {
			t.Errorf("%s: taken", name)
		} else if name == "plain text" && !strings.Contains(err.Error(), "store-server passwd") {
			t.Errorf("plain text: %v; want it to say how to write a hash", err)
		}
	}
}
