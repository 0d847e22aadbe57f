package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Target is a platform posgate's binaries are built for, with the C cross compiler cgo
// uses there (go-sqlite3 is C).
type Target struct {
	GOOS, GOARCH string
	CC           string   // the C cross compiler
	Tags         []string // build tags
	Static       bool     // link statically: a binary that needs no C library on the device
}

// The targets the terminal-agent ships for besides linux/amd64, built as `make release`
// builds them (keep the two alike).
var (
	// Windows is a Windows 10 / Server 2016 or later PC (mingw-w64; the .exe needs only
	// KERNEL32 and msvcrt).
	Windows = Target{GOOS: "windows", GOARCH: "amd64", CC: "x86_64-w64-mingw32-gcc"}
	// LinuxARM64 is a static arm64 binary for ARM tills and Android devices: no C library,
	// Go's own resolver (netgo) and user lookup (osusergo), no SQLite extension loading.
	LinuxARM64 = Target{GOOS: "linux", GOARCH: "arm64", CC: "aarch64-linux-gnu-gcc",
		Tags: []string{"netgo", "osusergo", "sqlite_omit_load_extension"}, Static: true}
)

// String is GOOS/GOARCH.
func (t Target) String() string { return t.GOOS + "/" + t.GOARCH }

// Exe is the file name of program on t.
func (t Target) Exe(program string) string {
	if t.GOOS == "windows" {
		return program + ".exe"
	}
	return program
}

// BuildArgs are `go build`'s flags for a release binary of t: no file system paths in it
// (-trimpath: nor a GOROOT that would find a zone database the device lacks), no symbol
// table, static where t is; extraLDFlags go into -ldflags (a version stamp, say).
func (t Target) BuildArgs(extraLDFlags ...string) []string {
	ld := append([]string{"-s", "-w"}, extraLDFlags...)
	if t.Static {
		ld = append(ld, "-extldflags", "-static")
	}
	args := []string{"-trimpath", "-ldflags", strings.Join(ld, " ")}
	if len(t.Tags) > 0 {
		args = append(args, "-tags", strings.Join(t.Tags, ","))
	}
	return args
}

// Env is the environment of a cross build for t: cgo on, with t's compiler.
func (t Target) Env() []string {
	return []string{"CGO_ENABLED=1", "GOOS=" + t.GOOS, "GOARCH=" + t.GOARCH, "CC=" + t.CC}
}

// CrossBuild builds the package pkg (./terminal-agent, say) for t into dir as a release
// binary and returns its path. root is the module's root. A first cross build compiles
// SQLite's C with the cross compiler (a minute or more); the Go build cache keeps the
// next ones to seconds, so a test binary builds once (sync.Once) and the cache stays warm.
func CrossBuild(ctx context.Context, root, dir string, t Target, pkg string) (string, error) {
	if _, err := exec.LookPath(t.CC); err != nil {
		return "", fmt.Errorf("%s cross compiler %s: %w (make deps installs it)", t, t.CC, err)
	}
	out := filepath.Join(dir, t.Exe(filepath.Base(pkg)))
	args := append(append([]string{"build", "-o", out}, t.BuildArgs()...), pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), t.Env()...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s for %s: %v\n%s", pkg, t, err, b)
	}
	return out, nil
}
