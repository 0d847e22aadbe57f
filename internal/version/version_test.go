package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestStringNamesEveryPart(t *testing.T) {
	old := Version
	oldCommit := Commit
	t.Cleanup(func() { Version, Commit = old, oldCommit })
	Version, Commit = "1.2.3-4-gabcdef0", "abcdef0123"
	s := String("terminal-agent")
	for _, want := range []string{"terminal-agent 1.2.3-4-gabcdef0 ", "commit abcdef0123", runtime.Version(), "SQLite 3.", runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(s, want) {
			t.Errorf("String = %q; want it to hold %q", s, want)
		}
	}
}

func TestCommitFallsBackWhenNotStamped(t *testing.T) {
	oldCommit := Commit
	t.Cleanup(func() { Commit = oldCommit })
	Commit = ""
	if c := commit(); c == "" {
		t.Error("commit() is empty; want the recorded revision or unknown")
	}
}
