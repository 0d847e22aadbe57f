//go:build linux

package field

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
)

// device lays out an Android-like device for the test and checks it is as described.
func device(t *testing.T, names ...string) *e2e.Device {
	t.Helper()
	d, err := e2e.NewDevice(t.TempDir(), names...)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestARM64AgentUnderQemu: the static linux/arm64 terminal-agent (ARM tills, Android) under
// qemu-user, on a device with no /etc/resolv.conf, no nsswitch.conf and no zone database
// (e2e.Device), given its broker as an IP: the same day as under Wine — live, cut, offline,
// SIGKILL with a backlog, restart, drain — and the ledger and Redis agree with the till.
func TestARM64AgentUnderQemu(t *testing.T) {
	stack.SkipShort(t)
	bin := arm64Agent(t)
	d := device(t)
	out, err := exec.Command(d.Runner().Launcher[0], append(d.Runner().Launcher[1:], bin, "--version")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "linux/arm64") {
		t.Fatalf("terminal-agent --version under qemu-aarch64: %v\n%s", err, out)
	}
	t.Logf("under qemu-aarch64: %s", strings.TrimSpace(string(out)))
	f := startField(t, bin, d.Runner(), "127.0.0.1")
	f.gone = processGone
	f.run()
}

// TestAndroidBrokerByHostsEntry: on the same device, a broker named by a hosts entry (an
// Android build's /system/etc/hosts, or the app's) is reached with no resolv.conf: Go's
// resolver reads the hosts file before it would ask a name server, and there is none.
func TestAndroidBrokerByHostsEntry(t *testing.T) {
	stack.SkipShort(t)
	bin := arm64Agent(t)
	d := device(t, "posgate-store")
	f := startField(t, bin, d.Runner(), "posgate-store")
	f.waitOnline(true, 30*time.Second)
	f.sell(5, 0)
	f.verify(5)
}

// processGone: the killed process (qemu-aarch64 running the agent) answers no signal.
func processGone(pid int) error {
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("the agent's process %d is still there after SIGKILL (%v)", pid, err)
	}
	return nil
}
