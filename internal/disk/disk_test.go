package disk

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestOf: the figures of a real directory's file system are positive and consistent, and
// writing a file there takes room from Free. Others (the other test packages) write to
// the same file system at the same time, so one measure may be off by what they wrote: the
// test tries up to five times and fails only when no try sees the write within 32 MiB.
func TestOf(t *testing.T) {
	dir := t.TempDir()
	const size = 64 << 20
	var seen []string
	for try := range 5 {
		before, err := Of(dir)
		if err != nil {
			t.Fatal(err)
		}
		if before.Total <= 0 || before.Free <= 0 || before.Free > before.Total {
			t.Fatalf("space %+v", before)
		}
		writeFile(t, filepath.Join(dir, fmt.Sprint("x", try)), size)
		after, err := Of(dir)
		if err != nil {
			t.Fatal(err)
		}
		d := before.Free - after.Free
		if d >= size-32<<20 && d <= size+32<<20 {
			seen = nil
			break
		}
		seen = append(seen, fmt.Sprintf("took %d (%+v then %+v)", d, before, after))
	}
	if seen != nil {
		t.Errorf("writing %d bytes, five times: %v", size, seen)
	}
	if _, err := Of(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory has a size")
	}
}

// writeFile writes size bytes to a new file at path and syncs it.
func writeFile(t *testing.T, path string, size int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
