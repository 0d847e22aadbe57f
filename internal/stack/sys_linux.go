package stack

import "syscall"

// sysProcAttr puts the child in its own process group, so that signalling -pid reaches
// everything it forked, and asks the kernel to SIGKILL it if the thread that started it
// dies: a crashed or killed test binary does not leave servers behind. The thread is the
// spawner's locked thread, which lives as long as the process (see spawn).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
