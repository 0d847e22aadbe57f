package enrol

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/refusals"
)

// TestList: the accounts' terminals and the file's are enrolled, others not; a message of
// another terminal goes no further and is booked terminal_unknown; the file is read again
// when it changes; no list at all is open.
func TestList(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	book := refusals.New(log, time.Minute, refusals.StoreMetric)
	path := filepath.Join(t.TempDir(), "terminals")
	if err := os.WriteFile(path, []byte("# the tills of S1\nT01\n  T02  # by the door\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := New(path, []string{"T09"}, book, log)
	if err != nil {
		t.Fatal(err)
	}
	for term, want := range map[string]bool{"T01": true, "T02": true, "T09": true, "T03": false, "": false, "t01": false} {
		if got := l.Enrolled(term); got != want {
			t.Errorf("Enrolled(%q) = %v", term, got)
		}
	}
	var passed []string
	up := l.Up(func(topic string, _ []byte) { passed = append(passed, topic) })
	st := l.Status(func(topic string, _ []byte, _ bool) { passed = append(passed, topic) })
	up("pos/S1/T01/up", nil)
	up("pos/S1/T77/up", nil)
	st("pos/S1/T77/status", nil, true)
	st("pos/S1/T02/backlog", nil, false)
	up("pos/S1", nil)
	if len(passed) != 2 || passed[0] != "pos/S1/T01/up" || passed[1] != "pos/S1/T02/backlog" {
		t.Errorf("passed %v", passed)
	}
	if n := book.Counts()[CodeTerminalUnknown]; n != 3 {
		t.Errorf("terminal_unknown booked %d times, want 3", n)
	}
	// The file changes: T03 is enrolled a second later, T01 no more.
	if err := os.WriteFile(path, []byte("T02\nT03\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l.checked = time.Time{}
	if !l.Enrolled("T03") || l.Enrolled("T01") {
		t.Errorf("after the change: T03 %v, T01 %v", l.Enrolled("T03"), l.Enrolled("T01"))
	}
	if (&List{}).Open() != true || l.Open() {
		t.Error("Open")
	}
	if _, err := Parse([]byte("T01\nnot a terminal\n")); err == nil {
		t.Error("an invalid id was taken")
	}
	if _, err := New(filepath.Join(t.TempDir(), "nope"), nil, book, log); err == nil {
		t.Error("a missing file was taken")
	}
}
