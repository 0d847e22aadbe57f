package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the child in its own process group and kills it if the parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// listensOn reports whether process pid holds a TCP socket listening on port: the kernel's
// socket tables (/proc/net/tcp, tcp6) name the listening sockets' inodes, and the process's
// open files (/proc/pid/fd) name the sockets it holds. A connection that something answered
// on the port proves nothing: another test's server may hold it while ours failed its bind.
func listensOn(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return false, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return false, err
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && inodes[target] {
			return true, nil
		}
	}
	return false, nil
}
