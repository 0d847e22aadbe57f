package broker

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/wire"
)

// Password rules of a terminal's MQTT account. bcrypt reads at most 72 bytes of a password.
const (
	MinPasswordBytes = 16
	MaxPasswordBytes = 72
	// HashCost is the bcrypt cost of the hashes the users file keeps (store-server passwd):
	// tens of milliseconds a login, at most, and a guess as dear.
	HashCost = 11
)

// HashPassword returns the bcrypt hash (cost cost; HashCost for a users file) of a terminal
// account's password, refusing one of fewer than MinPasswordBytes or more than
// MaxPasswordBytes bytes.
func HashPassword(password string, cost int) (string, error) {
	if len(password) < MinPasswordBytes || len(password) > MaxPasswordBytes {
		return "", fmt.Errorf("a terminal's password takes %d to %d bytes, not %d", MinPasswordBytes, MaxPasswordBytes,
			len(password))
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	return string(h), err
}

// NewUser returns a user whose password is hashed with cost (HashCost; tests may use
// bcrypt.MinCost).
func NewUser(username, password, terminal string, cost int) (User, error) {
	h, err := HashPassword(password, cost)
	return User{Username: username, PasswordHash: h, Terminal: terminal}, err
}

// LoadUsers reads the users file at path: a JSON array of User, each with a bcrypt hash of
// its password, decoded strictly (a plain-text "password" is refused).
func LoadUsers(path string) ([]User, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mqtt users: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var users []User
	if err := dec.Decode(&users); err != nil {
		if strings.Contains(err.Error(), `"password"`) {
			return nil, fmt.Errorf("mqtt users %s holds a plain-text password: write each account with "+
				"`store-server passwd` (a bcrypt hash)", path)
		}
		return nil, fmt.Errorf("mqtt users %s: %w", path, err)
	}
	// No accounts (null, or []) is not a broker with accounts: nil Users admit anyone.
	if len(users) == 0 {
		return nil, fmt.Errorf("mqtt users %s: no accounts in it; give each terminal its own", path)
	}
	seen := map[string]bool{}
	for _, u := range users {
		if err := u.check(); err != nil {
			return nil, fmt.Errorf("mqtt users %s: %w", path, err)
		}
		if seen[u.Username] {
			return nil, fmt.Errorf("mqtt users %s: user %q listed twice", path, u.Username)
		}
		seen[u.Username] = true
	}
	return users, nil
}

// check verifies a user's fields: a name, a terminal id and a bcrypt hash.
func (u User) check() error {
	if u.Username == "" || !wire.ValidID(u.Terminal) {
		return fmt.Errorf("user %q: every user needs username, password_hash and a valid terminal id", u.Username)
	}
	if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
		return fmt.Errorf("user %q: password_hash is not a bcrypt hash (store-server passwd writes one)", u.Username)
	}
	return nil
}

// SaveUser adds user to the users file at path (made if missing), or replaces the entry of
// the same username, and writes it back 0600 through a temporary file.
func SaveUser(path string, user User) error {
	if err := user.check(); err != nil {
		return err
	}
	var users []User
	if _, err := os.Stat(path); err == nil {
		if users, err = LoadUsers(path); err != nil {
			return err
		}
	}
	replaced := false
	for i := range users {
		if users[i].Username == user.Username {
			users[i], replaced = user, true
		}
	}
	if !replaced {
		users = append(users, user)
	}
	b, err := json.MarshalIndent(users, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// logins checks terminals' passwords, slowly for a guesser: an account or an address that
// failed a few times waits a doubling delay before its next password is even checked. A
// password checked right is remembered (its SHA-256, per account) so that the reconnects of
// a till on a flaky link do not each cost a bcrypt.
type logins struct {
	guard *guard.Guard
	mu    sync.Mutex
	known map[string][32]byte // username → SHA-256 of the password last checked right
}

func newLogins(g *guard.Guard) *logins {
	if g == nil {
		g = guard.New(guard.Config{Free: 5, Base: time.Second, Max: 5 * time.Minute})
	}
	return &logins{guard: g, known: map[string][32]byte{}}
}

// errWait refuses a login attempted while its account or address waits.
var errWait = errors.New("too many failed logins: waiting")

// check verifies password for a, attempted from addr.
func (l *logins) check(a *account, password []byte, addr string) error {
	if max(l.guard.Wait("user:"+a.Username), l.guard.Wait("addr:"+addr)) > 0 {
		return errWait
	}
	sum := sha256.Sum256(password)
	l.mu.Lock()
	k, ok := l.known[a.Username]
	l.mu.Unlock()
	if ok && subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
		return nil
	}
	if err := bcrypt.CompareHashAndPassword([]byte(a.PasswordHash), password); err != nil {
		l.guard.Fail("user:" + a.Username)
		l.guard.Fail("addr:" + addr)
		return errors.New("wrong password")
	}
	l.guard.Succeed("user:" + a.Username)
	l.guard.Succeed("addr:" + addr)
	l.mu.Lock()
	l.known[a.Username] = sum
	l.mu.Unlock()
	return nil
}

// fail counts a login refused before its password was checked (an unknown user) against
// its address.
func (l *logins) fail(addr string) error {
	if l.guard.Wait("addr:"+addr) > 0 {
		return errWait
	}
	l.guard.Fail("addr:" + addr)
	return nil
}
