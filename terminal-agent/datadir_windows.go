package main

import (
	"os"
	"path/filepath"
)

// defaultDataDir is where the outbox lives when --data-dir is not given: %ProgramData%\posgate,
// the machine's own application data, never the working directory (System32 for a service).
func defaultDataDir() string {
	base := os.Getenv("ProgramData")
	if base == "" {
		base = `C:\ProgramData`
	}
	return filepath.Join(base, "posgate")
}
