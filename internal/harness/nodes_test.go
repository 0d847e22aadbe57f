package harness

import (
	"context"
	"net"
	"testing"

	"github.com/posgate/posgate/internal/stack"
)

// TestStoreStartsAgainWhenItsPortWasTaken hands StartStore, for its broker, a port that
// something else took meanwhile: the store-server exits on the bind, and StartStore must
// start it again on other ports instead of failing or waiting 30 s.
func TestStoreStartsAgainWhenItsPortWasTaken(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Build(context.Background(), root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	orig := freeAddr
	t.Cleanup(func() { freeAddr = orig })
	calls := 0
	freeAddr = func() (string, error) {
		calls++
		if calls == 2 { // the first start's broker port
			return taken.Addr().String(), nil
		}
		return orig()
	}
	srv, err := StartStore(context.Background(), bins.StoreServer, StoreOptions{Store: "S1", DataDir: t.TempDir(),
		RedisAddr: s.Redis[0].Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if srv.Opts.MQTTListen == taken.Addr().String() || calls != 4 {
		t.Fatalf("broker on %s after %d picks; the taken port was %s", srv.Opts.MQTTListen, calls, taken.Addr())
	}
	var status map[string]any
	if err := srv.Call(context.Background(), "GET", "/v1/mode", "", nil, &status); err != nil {
		t.Fatalf("the restarted store does not answer: %v", err)
	}
}
