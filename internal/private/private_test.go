//go:build unix

package private

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestDirTightensWhatOthersCouldRead: a data directory left 0755 with 0644 files (an earlier
// run without the umask, an operator's copy) is made 0700 with 0600 files, each change
// logged; a private one is left as it is, with nothing logged.
func TestDirTightensWhatOthersCouldRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the test's umask
		t.Fatal(err)
	}
	for _, name := range []string{"ledger.db", "ledger.db-wal", "ledger.db.lock"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := Dir(dir, log); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir %v, want 0700", m)
	}
	for _, name := range []string{"ledger.db", "ledger.db-wal", "ledger.db.lock"} {
		if m := mode(t, filepath.Join(dir, name)); m != 0o600 {
			t.Errorf("%s %v, want 0600", name, m)
		}
	}
	if n := strings.Count(logs.String(), "made private"); n != 4 {
		t.Errorf("%d changes logged, want 4:\n%s", n, logs.String())
	}
	logs.Reset()
	if err := Dir(dir, log); err != nil || logs.Len() != 0 {
		t.Errorf("a private directory again: %v, logged %q", err, logs.String())
	}
}

// TestUmaskMakesNewFilesPrivate: after Umask, a file created 0644 and a directory created
// 0755 come out 0600 and 0700.
func TestUmaskMakesNewFilesPrivate(t *testing.T) {
	defer syscall.Umask(Umask())
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, f); m != 0o600 {
		t.Errorf("new file %v, want 0600", m)
	}
	if m := mode(t, d); m != 0o700 {
		t.Errorf("new directory %v, want 0700", m)
	}
}

// TestFilesTightensADatabaseAndItsCompanions: only the database's own files change; a file
// beside them that is not theirs stays as it was.
func TestFilesTightensADatabaseAndItsCompanions(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"hq.db", "hq.db-wal", "notes.txt"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Files(nil, filepath.Join(dir, "hq.db")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"hq.db": 0o600, "hq.db-wal": 0o600, "notes.txt": 0o644} {
		if m := mode(t, filepath.Join(dir, name)); m != want {
			t.Errorf("%s %v, want %v", name, m, want)
		}
	}
}

// TestWriteFileReplacesWholeAndPrivate: WriteFile replaces a file's content whole, leaves it
// 0600 whatever the old file's mode, and no temporary file beside it.
func TestWriteFileReplacesWholeAndPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "settings.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("content %q, want new", b)
	}
	if runtime.GOOS != "windows" {
		if m := mode(t, path); m != FileMode {
			t.Fatalf("mode %v, want %v", m, FileMode)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d files in the directory, want 1", len(entries))
	}
}
