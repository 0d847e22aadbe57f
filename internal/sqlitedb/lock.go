package sqlitedb

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrInUse is wrapped by OpenExclusive's error when another DB (in this process or another)
// holds the database.
var ErrInUse = errors.New("the database is in use by another process")

// errLocked is what tryLock returns when another open file holds the lock.
var errLocked = errors.New("locked")

// lockFile takes an exclusive, non-blocking lock on path+".lock" (created if needed) and
// writes this process's id into it. The lock lives as long as the returned file is open;
// the operating system drops it when the process dies, so a crash leaves no stale lock.
//
// The lock is on a file of its own, never on the database: SQLite locks the database with
// fcntl locks, which a process loses when it closes any descriptor of that file.
func lockFile(path string) (*os.File, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := tryLock(f); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, errLocked) {
			who := "another process"
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				who = "process " + pid
			}
			return nil, fmt.Errorf("%s is open in %s (%s held): %w", path, who, name, ErrInUse)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Lock takes the lock OpenExclusive takes on path, without opening the database: for a
// command that must not run while the process that owns the database does. Close the
// returned file to let go of it.
func Lock(path string) (*os.File, error) { return lockFile(path) }
