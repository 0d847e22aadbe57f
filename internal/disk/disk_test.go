package disk

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOf: the figures of a real directory's file system are positive and consistent, and
// writing a file there takes room from Free.
func TestOf(t *testing.T) {
	dir := t.TempDir()
	before, err := Of(dir)
	if err != nil {
		t.Fatal(err)
	}
	if before.Total <= 0 || before.Free <= 0 || before.Free > before.Total {
		t.Fatalf("space %+v", before)
	}
	f, err := os.Create(filepath.Join(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 64 << 20
	if _, err := f.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	after, err := Of(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Others write to this file system too: allow them 32 MiB either way.
	if d := before.Free - after.Free; d < size-32<<20 || d > size+32<<20 {
		t.Errorf("writing %d bytes took %d from Free (%+v then %+v)", size, d, before, after)
	}
	if _, err := Of(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory has a size")
	}
}
