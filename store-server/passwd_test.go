package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/posgate/posgate/store-server/broker"
)

// TestPasswd: `store-server passwd` writes a terminal's account with a bcrypt hash of the
// password read from stdin, which the broker's users file then loads; a short password is
// refused and nothing is written.
func TestPasswd(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users.json")
	var errs bytes.Buffer
	args := []string{"--users", path, "--username", "t01", "--terminal", "T01"}
	if err := passwd(args, strings.NewReader("short\n"), &errs); err == nil {
		t.Fatal("a 5-byte password was taken")
	}
	if err := passwd(args, strings.NewReader("the till's long password\n"), &errs); err != nil {
		t.Fatal(err)
	}
	users, err := broker.LoadUsers(path)
	if err != nil || len(users) != 1 {
		t.Fatalf("users %+v, %v", users, err)
	}
	if bcrypt.CompareHashAndPassword([]byte(users[0].PasswordHash), []byte("the till's long password")) != nil {
		t.Error("the hash is not of the password given")
	}
	if c, _ := bcrypt.Cost([]byte(users[0].PasswordHash)); c != broker.HashCost {
		t.Errorf("cost %d, want %d", c, broker.HashCost)
	}
}
