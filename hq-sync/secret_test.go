package main

import (
	"os"
	"path/filepath"
	"testing"
)

// secretFile writes a secret to a private file of the test and returns its path, for the
// --X-file flags that are the only way a secret is given beside the environment.
func secretFile(tb testing.TB, v string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}
