package sqlitedb

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestOpenExclusive: a second OpenExclusive of a path fails with ErrInUse while the first
// DB is open, and succeeds once it is closed; Open (HQ's database, read by reconcile while
// serve writes it) takes no lock.
func TestOpenExclusive(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := OpenExclusive(ctx, path, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenExclusive(ctx, path, testSchema); !errors.Is(err, ErrInUse) ||
		!strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second open: %v, want ErrInUse naming this process", err)
	}
	plain, err := Open(ctx, path, testSchema)
	if err != nil {
		t.Fatalf("open without the lock: %v", err)
	}
	plain.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = OpenExclusive(ctx, path, testSchema)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	db.Close()
}

// TestOpenExclusiveAcrossProcesses: a child process holds the database; this one is refused
// with the child's pid, and once the child is killed (no Close) the database opens: a crash
// leaves no stale lock.
func TestOpenExclusiveAcrossProcesses(t *testing.T) {
	if path := os.Getenv("POSGATE_SQLITEDB_HOLD"); path != "" {
		db, err := OpenExclusive(context.Background(), path, testSchema)
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		defer db.Close()
		os.Stdout.WriteString("held\n")
		select {} // until killed
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenExclusiveAcrossProcesses$")
	cmd.Env = append(os.Environ(), "POSGATE_SQLITEDB_HOLD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); errors.Is(err, syscall.ENOEXEC) {
		// Under qemu-user without binfmt (make test-qemu-unit) a test binary cannot start a
		// copy of itself; the native run of this test covers the lock.
		t.Skipf("this test binary cannot start a copy of itself here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	if _, err := OpenExclusive(ctx, path, testSchema); !errors.Is(err, ErrInUse) ||
		!strings.Contains(err.Error(), "process "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("open while the child holds it: %v, want ErrInUse naming pid %d", err, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	db, err := OpenExclusive(ctx, path, testSchema)
	if err != nil {
		t.Fatalf("open after the holder was killed: %v", err)
	}
	db.Close()
}
