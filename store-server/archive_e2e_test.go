package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// archiveRig is a store-server binary on a Redis of its own, its uploader and HQ.
type archiveRig struct {
	b       e2e.Binaries
	st      *stack.Stack
	srv     *e2e.StoreServer
	dataDir string
	hq      *e2e.Serve
	hqDB    string
	secret  string
	bus     *biBus
	seqs    map[string]int64
}

func (r *archiveRig) startStore(t *testing.T, dataDir string) {
	t.Helper()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err := e2e.StartStore(context.Background(), r.b.StoreServer, e2e.StoreOptions{Store: biStoreID, DataDir: dataDir,
		TZ: biTZ, RedisAddr: r.st.Redis[0].Addr(), MQTTURL: r.st.MQTTURL(), Token: biToken, Terminals: []string{"T1", "T2", "T3"},
		Extra: []string{"--redis-sweep-every", "100ms", "--redis-idem-ttl", "1s", "--keep", "10d"}})
	if err != nil {
		t.Fatal(err)
	}
	r.srv, r.dataDir = srv, dataDir
	t.Cleanup(func() {
		srv.Kill()
		if t.Failed() {
			t.Logf("store-server log: %s", tail(srv.Log))
		}
	})
}

func (r *archiveRig) upload(t *testing.T) {
	t.Helper()
	cmd := exec.Command(r.b.HQSync, "upload", "--once", "--store", biStoreID,
		"--ledger", filepath.Join(r.dataDir, "ledger.db"), "--state", filepath.Join(r.dataDir, "upload.db"),
		"--hq-url", r.hq.BatchesURL(), "--tz", biTZ)
	cmd.Env = append(os.Environ(), "POSGATE_HQ_SECRET="+r.secret)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hq-sync upload --once: %v\n%s", err, out)
	}
}

// send publishes one terminal's events and wants each accepted.
func (r *archiveRig) send(t *testing.T, terminal string, events ...[]byte) {
	t.Helper()
	r.bus.publish(t, terminal, biBatch(terminal, events...))
	d, ok := r.bus.next(terminal, 10*time.Second)
	if !ok || d.err != nil || len(d.acks.Acks) != len(events) {
		t.Fatalf("%s: acks %+v (%v)", terminal, d.acks, d.err)
	}
	for _, a := range d.acks.Acks {
		if a.Status != wire.AckAccepted {
			t.Fatalf("%s seq %d: %s %s", terminal, a.Seq, a.Status, a.Message)
		}
	}
}

// trade sends n cash sales of one apple (3.50) of a terminal on the day at, offline, and
// the terminal's day close of them.
func (r *archiveRig) trade(t *testing.T, at time.Time, terminal string, n int) {
	t.Helper()
	var events [][]byte
	for range n {
		r.seqs[terminal]++
		seq := r.seqs[terminal]
		p := biSale(fmt.Sprintf("%s-%d", terminal, seq), []biLine{{"A1", 1}}, nil, 0)
		env := wire.NewEnvelope(wire.KindSale, biStoreID, terminal, seq, at.Add(time.Duration(seq)*time.Second), biMarshal(t, p))
		env.Offline = true
		events = append(events, biMarshal(t, env))
	}
	r.seqs[terminal]++
	amount := money.Fen(350 * n)
	close := &wire.DayClosePayload{BusinessDate: at.Format(wire.BusinessDate), SaleCount: int64(n), SaleAmount: amount,
		Methods: []wire.MethodTotal{{Method: wire.MethodCash, SaleCount: int64(n), SaleAmount: amount}}}
	env := wire.NewEnvelope(wire.KindDayClose, biStoreID, terminal, r.seqs[terminal], at.Add(12*time.Hour), biMarshal(t, close))
	events = append(events, biMarshal(t, env))
	r.send(t, terminal, events...)
}

// reconcile runs hq-sync reconcile of a date at HQ and wants it to reconcile.
func (r *archiveRig) reconcile(t *testing.T, date string) {
	t.Helper()
	out, err := exec.Command(r.b.HQSync, "reconcile", "--db", r.hqDB, "--date", date, "--store", biStoreID).CombinedOutput()
	if err != nil {
		t.Fatalf("hq-sync reconcile --date %s: %v\n%s", date, err, out)
	}
}

// ledgerCount reads one number from the store's ledger.
func (r *archiveRig) ledgerCount(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	db := openLedgerRO(t, filepath.Join(r.dataDir, "ledger.db"))
	defer db.Close()
	var n int64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *archiveRig) archivedDays(t *testing.T) []string {
	t.Helper()
	db := openLedgerRO(t, filepath.Join(r.dataDir, "ledger.db"))
	defer db.Close()
	rows, err := db.Query(`SELECT business_date FROM archived_days ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		rows.Scan(&d)
		out = append(out, d)
	}
	return out
}

// TestArchiveEndToEnd: a store-server with --keep 10d trades two old days and one recent,
// its uploader sends them to HQ; the old days leave Redis and then the ledger for their
// month's archive, the recent one stays. The store's totals of an archived day answer as
// before; a backup carries the archives, and a store-server restored from it answers them
// too; a till offline since an archived day sends a sale of it: the uploader declares the
// day again with the archived sales and the late one, and HQ's reconcile of the day passes.
func TestArchiveEndToEnd(t *testing.T) {
	t.Parallel()
	b := binaries(t)
	ctx := context.Background()
	r := &archiveRig{b: b, st: stack.Run(t, stack.Options{Redis: true, MQTT: true}), secret: "s1-secret-for-the-archive-test",
		seqs: map[string]int64{}}
	dir := t.TempDir()
	r.startStore(t, filepath.Join(dir, "store"))
	if _, err := r.srv.Manager().ImportCatalogCSV(ctx, strings.NewReader(biCatalogCSV)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.srv.Manager().Adjust(ctx, client.AdjustRequest{ID: "opening-A1", SKU: "A1", Delta: 10000, Reason: client.ReasonOpening}); err != nil {
		t.Fatal(err)
	}
	storesFile := filepath.Join(dir, "stores.json")
	js, _ := json.Marshal([]map[string]string{{"store": biStoreID, "secret": r.secret}})
	if err := os.WriteFile(storesFile, js, 0o600); err != nil {
		t.Fatal(err)
	}
	r.hqDB = filepath.Join(dir, "hq.db")
	hq, err := e2e.StartServe(ctx, b.HQSync, e2e.ServeOptions{DB: r.hqDB, StoresFile: storesFile, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r.hq = hq
	t.Cleanup(func() { hq.Kill() })
	r.bus = biConnect(t, r.st.MQTTURL())

	loc, _ := time.LoadLocation(biTZ)
	now := time.Now().In(loc)
	old1 := time.Date(now.Year(), now.Month(), now.Day()-40, 9, 0, 0, 0, loc)
	old2 := time.Date(now.Year(), now.Month(), now.Day()-35, 9, 0, 0, 0, loc)
	recent := time.Date(now.Year(), now.Month(), now.Day()-3, 9, 0, 0, 0, loc)
	for _, at := range []time.Time{old1, old2, recent} {
		r.trade(t, at, "T1", 30)
		r.trade(t, at, "T2", 20)
	}
	d1, d2, d3 := old1.Format(wire.BusinessDate), old2.Format(wire.BusinessDate), recent.Format(wire.BusinessDate)
	totals := map[string]client.TotalsAnswer{}
	for _, d := range []string{d1, d2, d3} {
		totals[d] = ledgerTotals(must[client.TotalsAnswer](t, "totals")(r.srv.Manager().Totals(ctx, d)))
		if totals[d].Store.Sales != 50 {
			t.Fatalf("totals of %s before the archive: %+v", d, totals[d].Store)
		}
	}
	r.upload(t)
	waitFor(t, 30*time.Second, "the old days archived", func() bool {
		return reflect.DeepEqual(r.archivedDays(t), []string{d1, d2})
	})
	for _, d := range []string{d1, d2} {
		if _, err := os.Stat(filepath.Join(r.dataDir, "archive", "ledger-"+d[:7]+".db")); err != nil {
			t.Fatalf("the archive of %s: %v", d, err)
		}
	}
	sameTotals := func(srv *e2e.StoreServer, when string) {
		t.Helper()
		for _, d := range []string{d1, d2, d3} {
			got := ledgerTotals(must[client.TotalsAnswer](t, "totals")(srv.Manager().Totals(ctx, d)))
			if !reflect.DeepEqual(got, totals[d]) {
				t.Errorf("totals of %s %s:\n got %+v\nwant %+v", d, when, got, totals[d])
			}
		}
	}
	sameTotals(r.srv, "after the archive")

	// The backup carries the archives; a store restored from it finds the archived days.
	body, err := r.srv.Manager().Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	_, err = io.Copy(&tarball, body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(dir, "restored")
	names := untar(t, tarball.Bytes(), restored)
	for _, d := range []string{d1, d2} {
		if !strings.Contains(names, "archive/ledger-"+d[:7]+".db") {
			t.Fatalf("the backup holds %s, not the archive of %s", names, d)
		}
	}

	// A till offline since the first old day sends a sale of it (and its day close); the
	// uploader declares the day again, archived sales and the late one, and HQ reconciles it.
	r.trade(t, old1.Add(2*time.Hour), "T3", 1)
	r.upload(t)
	r.reconcile(t, d1)
	r.reconcile(t, d2)
	if got := must[client.TotalsAnswer](t, "totals")(r.srv.Manager().Totals(ctx, d1)); got.Store.Sales != 51 {
		t.Errorf("totals of %s with its late sale: %+v", d1, got.Store)
	}
	// HQ holds them: the late sale and its day close go to the day's archive too.
	waitFor(t, 30*time.Second, "the late sale moved to the archive", func() bool {
		return r.ledgerCount(t, `SELECT (SELECT count(*) FROM sales WHERE business_date = ?1) +
			(SELECT count(*) FROM day_closes WHERE business_date = ?1)`, d1) == 0
	})
	if got := must[client.TotalsAnswer](t, "totals")(r.srv.Manager().Totals(ctx, d1)); got.Store.Sales != 51 {
		t.Errorf("totals of %s with its late sale in the archive: %+v", d1, got.Store)
	}
	r.reconcile(t, d1)

	r.srv.Stop()
	r.startStore(t, restored)
	sameTotals(r.srv, "in the restored store")
}

// ledgerTotals keeps of a totals answer what the ledger says, and the day closes: Redis's
// side of a day whose keys left it is not the archive's business.
func ledgerTotals(a client.TotalsAnswer) client.TotalsAnswer {
	out := client.TotalsAnswer{BusinessDate: a.BusinessDate, Store: a.Store}
	for _, tt := range a.Terminals {
		out.Terminals = append(out.Terminals, client.TerminalTotals{Terminal: tt.Terminal, Ledger: tt.Ledger,
			Declared: tt.Declared, DeclaredOK: tt.DeclaredOK})
	}
	return out
}

// untar writes a tar's files under dir and returns their names.
func untar(t *testing.T, b []byte, dir string) string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return strings.Join(names, " ")
}
