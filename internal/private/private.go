// Package private keeps posgate's data to its own user: the ledger, the outbox, HQ's
// database, their -wal and -shm files, lock files, catalogs, backups' temporary copies and
// keys hold sales, prices and secrets that no other account on the machine may read.
//
// Each binary calls Umask once at start, so every file it creates is 0600 and every
// directory 0700, and Dir on each data directory it opens, which tightens what an earlier
// run or an operator left open to others. On Windows, where files take the ACL of their
// directory, both do nothing; the installer's directory under %ProgramData% sets it.
package private

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Modes of what posgate keeps.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// Dir creates dir (and its parents) with DirMode if it is missing, and otherwise takes away
// every permission of group and others from it and from the regular files directly in it,
// logging each path it changed. It does not descend: a data directory holds its files at its
// top (a subdirectory, such as an archive, is tightened when its owner opens it with Dir).
// A directory it cannot tighten (not the process's own) is an error: the data in it would
// stay readable to others.
func Dir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	if !enforced {
		return nil
	}
	if err := tighten(dir, DirMode, log); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := tighten(filepath.Join(dir, e.Name()), FileMode, log); err != nil {
				return err
			}
		}
	}
	return nil
}

// Files takes every permission of group and others from each of paths that exists, and from
// its SQLite companions (-wal, -shm, .lock), logging each change: for a database kept in a
// directory posgate does not own (HQ's hq.db in a working directory).
func Files(log *slog.Logger, paths ...string) error {
	if !enforced {
		return nil
	}
	for _, p := range paths {
		for _, f := range []string{p, p + "-wal", p + "-shm", p + ".lock"} {
			if err := tighten(f, FileMode, log); err != nil {
				return err
			}
		}
	}
	return nil
}

// tighten clears the group and other bits of path's mode, keeping the owner's within max.
func tighten(path string, max fs.FileMode, log *slog.Logger) error {
	st, err := os.Lstat(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // removed meanwhile (a -shm file at a checkpoint)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	mode := st.Mode().Perm()
	if mode&^max == 0 {
		return nil
	}
	if err := os.Chmod(path, mode&max); err != nil {
		return fmt.Errorf("%s is %v, open to other accounts, and cannot be made private: %w", path, mode, err)
	}
	if log != nil {
		log.Warn("made private: it was open to other accounts", "path", path, "was", mode.String(), "now", (mode & max).String())
	}
	return nil
}

// WriteFile replaces the file at path with body whole and private (FileMode): a temporary
// file of its own beside it, synced, then renamed over it, so that a crash leaves the old
// file or the new one, never half of either.
func WriteFile(path string, body []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	if _, err = f.Write(body); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), FileMode)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
