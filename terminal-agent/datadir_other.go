//go:build !windows

package main

// defaultDataDir is where the outbox lives when --data-dir is not given: ./data, beside
// the working directory of the process that starts the agent (a systemd unit's
// WorkingDirectory, an Android app's files directory).
func defaultDataDir() string { return "./data" }
