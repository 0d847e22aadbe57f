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

// TestEnrolledAtOnce: a till added to the file is taken at its first message once
// missRecheck has passed, though the file was looked at a moment before; the terminals on
// it do not make the file be looked at more than once a second (one taken off the list
// stays until then), and strangers no more than once in missRecheck.
func TestEnrolledAtOnce(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	book := refusals.New(log, time.Minute, refusals.StoreMetric)
	path := filepath.Join(t.TempDir(), "terminals")
	if err := os.WriteFile(path, []byte("T01\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := New(path, nil, book, log)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Enrolled("T01") || l.Enrolled("T02") {
		t.Fatal("before the change")
	}
	// Another size: a file rewritten within the clock's tick is told by its size.
	if err := os.WriteFile(path, []byte("T02\nT04\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	looked := l.checked
	l.mu.Unlock()
	if l.Enrolled("T02") && time.Since(looked) < missRecheck {
		t.Error("a stranger had the file looked at again within missRecheck")
	}
	time.Sleep(missRecheck + 10*time.Millisecond)
	if !l.Enrolled("T02") {
		t.Error("a till added to the file was not taken at its first message after missRecheck")
	}
	if err := os.WriteFile(path, []byte("T03\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.checked = time.Now().Add(-2 * missRecheck) // looked at a moment ago, less than recheck
	l.mu.Unlock()
	if !l.Enrolled("T02") {
		t.Error("an enrolled till had the file looked at again within a second")
	}
	if !l.Enrolled("T03") || l.Enrolled("T02") {
		t.Error("a stranger (T03, now on the file) did not have it looked at again; or T02 stayed after it")
	}
}

// TestBadFileKeepsTheList: a terminals file changed into one that cannot be read keeps the
// list read before, logged once however many messages come, and read when it is good again.
func TestBadFileKeepsTheList(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	path := filepath.Join(t.TempDir(), "terminals")
	if err := os.WriteFile(path, []byte("T01\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := New(path, nil, refusals.New(log, time.Minute, refusals.StoreMetric), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("T01\nT02 by the door\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		l.mu.Lock()
		l.checked = time.Time{}
		l.mu.Unlock()
		if !l.Enrolled("T01") || l.Enrolled("T02") {
			t.Fatal("the list read before was not kept")
		}
	}
	if n := bytes.Count(out.Bytes(), []byte("keeping the list read before")); n != 1 {
		t.Errorf("the bad file logged %d times, want once:\n%s", n, out.String())
	}
	if err := os.WriteFile(path, []byte("T01\nT02 # by the door\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.checked = time.Time{}
	l.mu.Unlock()
	if !l.Enrolled("T02") {
		t.Error("the file made good again was not read")
	}
}

// TestSameSizeSameTime: a file rewritten with other terminals of the same size and left
// with the same modification time (a rewrite within the clock tick of the last read) is
// still read again: a file changed that recently is not trusted by its size and time.
func TestSameSizeSameTime(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	book := refusals.New(log, time.Minute, refusals.StoreMetric)
	path := filepath.Join(t.TempDir(), "terminals")
	if err := os.WriteFile(path, []byte("T01\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(path, nil, book, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("T02\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.checked = time.Time{} // looked at long ago
	l.mu.Unlock()
	if !l.Enrolled("T02") || l.Enrolled("T01") {
		t.Error("a same-size rewrite with the same time went unseen")
	}
}
