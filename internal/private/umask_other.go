//go:build !unix

package private

const enforced = false

// Umask does nothing where there is no umask (Windows: files take their directory's ACL).
func Umask() int { return 0 }
