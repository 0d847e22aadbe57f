//go:build unix && !linux

package stack

import "syscall"

// sysProcAttr puts the child in its own process group, so that signalling -pid reaches
// everything it forked.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupAlive reports whether a process of process group pgid still exists.
func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }

// childrenOf is not known on this system: a killed postgres's backends are waited for by
// its process group alone.
func childrenOf(int) []int { return nil }

// alive reports whether pid still exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
