//go:build unix

package e2e

import (
	"os"
	"syscall"
)

// signalGroup sends sig to the process group p leads (sysProcAttr made it one).
func signalGroup(p *os.Process, sig syscall.Signal) { syscall.Kill(-p.Pid, sig) }
