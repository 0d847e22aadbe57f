package harness

import "syscall"

// sysProcAttr puts the child in its own process group and kills it if the parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
