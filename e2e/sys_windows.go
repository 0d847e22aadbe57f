package e2e

import (
	"os"
	"syscall"
)

// sysProcAttr: a Windows child needs nothing more.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup ends p: Windows has no signals to send, and a stop is a kill.
func signalGroup(p *os.Process, _ syscall.Signal) { p.Kill() }
