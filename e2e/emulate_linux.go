package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Wine is a Wine prefix (a Windows installation of its own, C:\ under Prefix/drive_c) that
// runs posgate's Windows binaries on this machine.
type Wine struct {
	Prefix   string
	zoneless string // an empty directory: ZONEINFO points at it
	fixture  bool   // the stand-in bcryptprimitives.dll is installed
}

// SetupWine creates a Wine prefix under dir and, when its Wine has no
// bcryptprimitives.dll (Wine 8.0, Debian 12's: Go 1.26 binaries need its ProcessPrng),
// builds the test fixture e2e/winefix/bcryptprimitives.dll with mingw-w64 into its system32:
// Go's runtime loads that DLL from system32 alone, so beside the .exe it would not be found.
// root is the module's root. Close ends the prefix's processes.
func SetupWine(ctx context.Context, root, dir string) (*Wine, error) {
	if _, err := exec.LookPath("wine"); err != nil {
		return nil, fmt.Errorf("wine: %w (make deps installs it)", err)
	}
	w := &Wine{Prefix: filepath.Join(dir, "wine-prefix"), zoneless: filepath.Join(dir, "no-zoneinfo")}
	if err := os.MkdirAll(w.zoneless, 0o755); err != nil {
		return nil, err
	}
	// A persistent wineserver: without it, Wine ends the prefix's system processes (the
	// service control manager, and the services it runs) once no program of its own runs.
	// It runs until Close's wineserver -k.
	if err := os.MkdirAll(w.Prefix, 0o755); err != nil {
		return nil, err
	}
	server := exec.Command("wineserver", "--persistent", "--foreground")
	server.Env = append(os.Environ(), w.Env()...)
	server.SysProcAttr = sysProcAttr() // it dies with the test process
	if err := server.Start(); err != nil {
		return nil, fmt.Errorf("wineserver --persistent: %w", err)
	}
	go server.Wait()
	// The first program creates the prefix (Wine runs wineboot for it). An explicit
	// `wineboot --init` besides would start a second service control manager.
	if out, err := w.Run(ctx, "cmd", "/c", "ver"); err != nil {
		return nil, fmt.Errorf("create the Wine prefix: %v\n%s", err, out)
	}
	dll := filepath.Join(w.Prefix, "drive_c", "windows", "system32", "bcryptprimitives.dll")
	if _, err := os.Stat(dll); errors.Is(err, os.ErrNotExist) {
		src := filepath.Join(root, "e2e", "winefix")
		cc := exec.CommandContext(ctx, Windows.CC, "-O2", "-shared", "-o", dll,
			filepath.Join(src, "bcryptprimitives.c"), filepath.Join(src, "bcryptprimitives.def"), "-ladvapi32")
		if out, err := cc.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build the bcryptprimitives.dll fixture: %v\n%s", err, out)
		}
		w.fixture = true
	}
	return w, nil
}

// Env is the environment of a program run in the prefix: no Wine debug output, the fixture
// DLL loaded as native, and no zone database but the binary's own (ZONEINFO at an empty
// directory, no GOROOT: a Windows PC has no Go installation).
func (w *Wine) Env() []string {
	env := []string{"WINEPREFIX=" + w.Prefix, "WINEDEBUG=-all", "ZONEINFO=" + w.zoneless}
	if w.fixture {
		env = append(env, "WINEDLLOVERRIDES=bcryptprimitives=n")
	}
	return env
}

// Runner runs Windows binaries in the prefix. wine execs the program's Windows process in
// the process it started: SIGKILL kills the Windows process itself.
func (w *Wine) Runner() *Runner {
	return &Runner{Launcher: []string{"wine"}, Env: w.Env(), EnvDrop: []string{"GOROOT"}, ListensOn: w.listensOn}
}

// Command is wine running program (a Windows program of the prefix, or a path to one)
// with args, in the prefix's environment.
func (w *Wine) Command(ctx context.Context, program string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "wine", append([]string{program}, args...)...)
	cmd.Env = append(environ([]string{"GOROOT"}), w.Env()...)
	return cmd
}

// Run runs program as Command does and returns its output. The output goes through a file,
// not a pipe: the prefix's system processes that a first program starts (services.exe and
// the like) inherit its output and outlive it, and a pipe would stay open with them.
func (w *Wine) Run(ctx context.Context, program string, args ...string) (string, error) {
	f, err := os.CreateTemp("", "posgate-wine-out-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := w.Command(ctx, program, args...)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, _ := os.ReadFile(f.Name())
	return string(out), err
}

// Close ends every process of the prefix and its wineserver.
func (w *Wine) Close() error {
	cmd := exec.Command("wineserver", "-k")
	cmd.Env = append(os.Environ(), w.Env()...)
	return cmd.Run()
}

// listensOn: the prefix's wineserver holds its processes' sockets, so a port one of them
// listens on is found among the wineserver's open files.
func (w *Wine) listensOn(_, port int) (bool, error) {
	for _, pid := range w.Processes("wineserver") {
		if ok, err := listensOn(pid, port); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// Processes returns the pids of the prefix's processes whose command line holds name (the
// Windows processes of a program, or its wineserver).
func (w *Wine) Processes(name string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if bytes.Contains(cmdline, []byte(name)) && slices.ContainsFunc(bytes.Split(environ, []byte{0}), func(kv []byte) bool {
			return string(kv) == "WINEPREFIX="+w.Prefix
		}) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Device runs linux/arm64 binaries under qemu-user as on an Android device or an ARM till
// with no Linux distribution: in a mount namespace (unshare -m, as root) whose /etc holds
// only a hosts file (no resolv.conf, no nsswitch.conf: Go's resolver finds no name server)
// and whose /usr/share/zoneinfo is empty. It is not Android (no bionic, no SELinux, no app
// sandbox): it is what an Android device leaves a static Go binary to find.
type Device struct {
	etc, zoneless string
}

// NewDevice lays out the device's /etc under dir, with hosts naming each of names as
// 127.0.0.1 (a store's broker given by a hosts entry).
func NewDevice(dir string, names ...string) (*Device, error) {
	d := &Device{etc: filepath.Join(dir, "device-etc"), zoneless: filepath.Join(dir, "device-no-zoneinfo")}
	for _, p := range []string{d.etc, d.zoneless} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	hosts := "127.0.0.1 localhost\n::1 localhost ip6-localhost\n"
	for _, n := range names {
		hosts += "127.0.0.1 " + n + "\n"
	}
	if err := os.WriteFile(filepath.Join(d.etc, "hosts"), []byte(hosts), 0o644); err != nil {
		return nil, err
	}
	// qemu-aarch64 itself is this machine's dynamically linked program: its loader reads
	// ld.so.cache. The arm64 binary is static and reads nothing of it.
	cache, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		return nil, err
	}
	return d, os.WriteFile(filepath.Join(d.etc, "ld.so.cache"), cache, 0o644)
}

// script mounts the device's /etc and empty zone directory, then execs the rest.
func (d *Device) script(then string) []string {
	return []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		fmt.Sprintf("mount --bind '%s' /etc && mount --bind '%s' /usr/share/zoneinfo && exec %s",
			d.etc, d.zoneless, then), "posgate-device"}
}

// Runner runs arm64 binaries on the device. unshare, sh and qemu-aarch64 each exec the
// next in the same process: SIGKILL kills the emulated binary itself.
func (d *Device) Runner() *Runner {
	if _, err := exec.LookPath("qemu-aarch64"); err != nil {
		// Launching fails with this name in the log; make deps installs qemu-user.
		return &Runner{Launcher: []string{"qemu-aarch64"}}
	}
	return &Runner{Launcher: d.script(`qemu-aarch64 "$@"`), EnvDrop: []string{"GOROOT", "ZONEINFO"}}
}

// Check proves the device is as described: inside its namespace /etc has no resolv.conf
// nor nsswitch.conf, and the zone directory is empty.
func (d *Device) Check(ctx context.Context) error {
	argv := d.script(`sh -c 'test ! -e /etc/resolv.conf && test ! -e /etc/nsswitch.conf && test -z "$(ls -A /usr/share/zoneinfo)" && cat /etc/hosts'`)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("the device's namespace is not as described (unshare needs root): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "localhost") {
		return fmt.Errorf("the device's /etc/hosts reads %q", out)
	}
	return nil
}
