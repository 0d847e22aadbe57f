package stack

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so that signalling -pid reaches
// everything it forked, and asks the kernel to SIGKILL it if the thread that started it
// dies: a crashed or killed test binary does not leave servers behind. The thread is the
// spawner's locked thread, which lives as long as the process (see spawn).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// groupAlive reports whether a process of process group pgid is still running (zombies,
// which hold no resources, do not count).
func groupAlive(pgid int) bool {
	found, err := scanProcs(func(_ int, state string, _, pgrp int) bool { return pgrp == pgid && running(state) })
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	return len(found) > 0
}

// childrenOf returns the running processes whose parent is pid. A postgres backend is its
// own process group's leader (so that its postmaster can signal it and what it forks), so
// signalling the postmaster's group does not reach it.
func childrenOf(pid int) []int {
	found, _ := scanProcs(func(_ int, state string, ppid, _ int) bool { return ppid == pid && running(state) })
	return found
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	found, err := scanProcs(func(p int, state string, _, _ int) bool { return p == pid && running(state) })
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	return len(found) > 0
}

func running(state string) bool { return state != "Z" && state != "X" }

// scanProcs returns the pids of /proc's processes for which keep holds.
func scanProcs(keep func(pid int, state string, ppid, pgrp int) bool) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var found []int
	for _, e := range entries {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 3 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgrp, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil && keep(pid, f[0], ppid, pgrp) {
			found = append(found, pid)
		}
	}
	return found, nil
}
