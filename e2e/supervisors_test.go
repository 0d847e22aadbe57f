//go:build unix

package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	storeclient "github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestSupervisorsFromTheStore runs a real store-server and agent: the manager sets a
// supervisor and a refund threshold through the manager API, the store publishes them, and
// the till then refuses a refund above the threshold without the supervisor or with a wrong
// PIN, takes it with the right one, and the store records who approved it.
func TestSupervisorsFromTheStore(t *testing.T) {
	stack.SkipShort(t) // before the build
	t.Parallel()
	ctx := context.Background()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Build(ctx, root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	st := stack.Run(t, stack.Options{Redis: true})
	dir := t.TempDir()
	cat := filepath.Join(dir, "catalog.csv")
	os.WriteFile(cat, []byte("sku,name,price\nMILK,Milk 1L,12.50\n"), 0o600)
	for _, d := range []string{"store", "agent"} {
		os.MkdirAll(filepath.Join(dir, d), 0o700)
	}
	srv, err := StartStore(ctx, bins.StoreServer, StoreOptions{Store: "S1", DataDir: filepath.Join(dir, "store"),
		RedisAddr: st.Redis[0].Addr(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Kill() })
	m := srv.Manager()
	if _, err := m.Adjust(ctx, storeclient.AdjustRequest{ID: "opening-MILK", SKU: "MILK", Delta: 100,
		Reason: storeclient.ReasonOpening}); err != nil {
		t.Fatal(err)
	}
	above := money.Fen(2000)
	if _, err := m.SetSupervisor(ctx, "Wang Li", "482913"); err != nil {
		t.Fatal(err)
	}
	set, err := m.SetRefundRules(ctx, storeclient.RefundRules{SupervisorAbove: &above})
	if err != nil || !set.Published || len(set.Supervisors) != 1 || set.Supervisors[0] != "Wang Li" {
		t.Fatalf("settings: %+v %v", set, err)
	}
	a, err := StartAgent(ctx, bins.TerminalAgent, AgentOptions{Store: "S1", Terminal: "T1", Broker: srv.Broker,
		DataDir: filepath.Join(dir, "agent")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Kill() })
	c := a.Cashier().Client()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := c.Status(ctx)
		if err == nil && s.CatalogVersion > 0 && s.SettingsVersion == set.Version && s.Online {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never held the store's settings %d: %+v %v", set.Version, s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	open, err := c.OpenSale(ctx, client.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	id := open.Sale.ID
	if _, err := c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "MILK", Qty: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pay(ctx, client.NewKey(), id, client.PayRequest{Method: "cash", Amount: "25.00"}); err != nil {
		t.Fatal(err)
	}
	refund := func(sv *client.Supervisor) (client.RefundAnswer, error) {
		return c.Refund(ctx, client.NewKey(), client.RefundRequest{SaleID: id, Supervisor: sv})
	}
	for _, x := range []struct {
		sv     *client.Supervisor
		status int
		code   string
	}{
		{nil, http.StatusForbidden, outbox.CodeSupervisorRequired},
		{&client.Supervisor{Name: "Wang Li", PIN: "000000"}, http.StatusForbidden, outbox.CodeSupervisorPINWrong},
		{&client.Supervisor{Name: "anyone", PIN: "482913"}, http.StatusForbidden, outbox.CodeSupervisorUnknown},
	} {
		var e *client.Error
		if _, err := refund(x.sv); !errors.As(err, &e) || e.Status != x.status || e.Code != x.code {
			t.Fatalf("refund of 25.00 approved by %+v: %v, want %d %s", x.sv, err, x.status, x.code)
		}
	}
	ra, err := refund(&client.Supervisor{Name: "Wang Li", PIN: "482913"})
	if err != nil || ra.Refund.ApprovedBy != "Wang Li" || ra.Refund.Amount != 2500 || ra.Event == nil || ra.Event.Offline {
		t.Fatalf("the approved refund: %+v %v", ra, err)
	}
	drained, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := a.Cashier().WaitDrained(drained); err != nil {
		t.Fatal(err)
	}
	tot, err := m.Totals(ctx, ra.Refund.BusinessDate)
	if err != nil || tot.Store.Refunds != 1 || tot.Store.RefundAmount != 2500 {
		t.Fatalf("the store's totals: %+v %v, want the one refund of 25.00", tot.Store, err)
	}
	// The store's ledger holds the refund as the till sent it: approved by Wang Li.
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(srv.Opts.DataDir, "ledger.db")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var payload []byte
	if err := db.QueryRow(`SELECT payload FROM events WHERE terminal = 'T1' AND seq = ?`, ra.Event.Seq).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var p wire.RefundPayload
	if err := json.Unmarshal(payload, &p); err != nil || p.ApprovedBy != "Wang Li" || bytes.Contains(payload, []byte("482913")) {
		t.Fatalf("the store's record of the refund: %s (%v)", payload, err)
	}
}
