//go:build !windows

package main

import (
	"fmt"
	"os"
)

// serviceMain: the service commands are Windows'; elsewhere the agent runs under the
// system's own supervisor (systemd, an Android foreground service) as a plain process.
func serviceMain([]string) int {
	fmt.Fprintln(os.Stderr, "terminal-agent service: Windows only; run terminal-agent under the system's supervisor here (docs/android.md)")
	return 2
}
