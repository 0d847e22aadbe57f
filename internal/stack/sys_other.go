//go:build unix && !linux

package stack

import "syscall"

// sysProcAttr puts the child in its own process group, so that signalling -pid reaches
// everything it forked.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
