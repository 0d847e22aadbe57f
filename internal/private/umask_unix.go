//go:build unix

package private

import "syscall"

const enforced = true

// Umask makes every file and directory the process creates from now on private to its user
// (umask 077), and returns the mask it replaced.
func Umask() int { return syscall.Umask(0o077) }
