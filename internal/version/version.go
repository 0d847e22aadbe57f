// Package version names the build of a posgate binary: the release version and the commit,
// both stamped by `make` (-ldflags -X from `git describe` and `git rev-parse`), and the Go
// and SQLite versions it was built with. `--version` prints it for each binary.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/mattn/go-sqlite3"
)

// Version is the release version: the release the source is of ("0.1.0") in a plain
// `go build`, `git describe`'s answer (0.1.0, or 0.1.0-N-gCOMMIT after it) in a build by make.
var Version = "0.1.0"

// Commit is the source commit: stamped by make; otherwise the commit Go recorded at build
// (with -buildvcs), or "unknown".
var Commit = ""

// commit returns Commit, or what the build recorded.
func commit() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}

// String is the line --version prints: the program's name, its version, commit, Go and
// SQLite versions, and the platform it was built for.
func String(program string) string {
	lib, _, _ := sqlite3.Version()
	return fmt.Sprintf("%s %s (commit %s, %s, SQLite %s, %s/%s)", program, Version, commit(),
		runtime.Version(), lib, runtime.GOOS, runtime.GOARCH)
}
