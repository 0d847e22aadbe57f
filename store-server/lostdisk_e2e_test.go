package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/posgate/posgate/store-server/client"
)

// TestLostDiskUploaderResumes: three tills sell under a cashier load while the store's
// uploader sends the ledger to HQ; the store-server is SIGKILLed and its data directory lost
// with no backup, all but the uploader's state (a disk of its own). The store starts on an
// empty ledger (the opening stock booked again by the manager) while the tills go on
// selling: catch-up refills the ledger from the tills' outboxes, every event answered 2xx
// once, with its receipt's flow number, no seq gap; the uploader, its state kept and started
// again as its unit does, is refused while the ledger lacks the last row HQ acknowledged and
// goes on by itself once it holds it: HQ = ledger, row by row.
func TestLostDiskUploaderResumes(t *testing.T) {
	t.Parallel() // mostly a cashier load's waiting: it runs beside the other long restores
	e := newEnv(t, "Asia/Shanghai", []string{"T01", "T02", "T03"})
	dir := e.store.Opts.DataDir
	hq := startHQ(t, binaries(t), dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wg := e.load(ctx)
	var sent int64
	for deadline := time.Now().Add(time.Minute); sent < 100; time.Sleep(500 * time.Millisecond) {
		if a, err := e.store.Manager().HQ(context.Background()); err == nil && a.Upload != nil {
			sent = a.Upload.SentThrough
		}
		if time.Now().After(deadline) {
			t.Fatalf("HQ acknowledged %d rows within a minute of selling, want 100 or more", sent)
		}
	}
	hq.up.Kill()
	e.store.Kill()
	atLoss := len(e.allOK())
	state := keepFiles(t, dir, "upload.db", "upload.db-wal")
	if err := os.RemoveAll(dir); err != nil { // the disk is gone, and no backup
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	putFiles(t, dir, state)
	restart := time.Now()
	if err := e.store.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := e.store.Manager()
	for sku, q := range e2eOpening { // the manager books the opening stock again (the same ids)
		req := client.AdjustRequest{ID: "opening-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}
		if _, err := m.Adjust(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.AllowOfflineRefunds(context.Background()); err != nil {
		t.Fatal(err)
	}
	sup, stopSup := context.WithCancel(context.Background())
	supervised := make(chan struct{})
	go func() { defer close(supervised); hq.superviseUploader(sup) }()
	defer func() { stopSup(); <-supervised }()
	time.Sleep(5 * time.Second) // selling on while the store catches up
	cancel()
	wg.Wait()
	within, done := context.WithTimeout(context.Background(), time.Minute)
	defer done()
	for term, c := range e.cashiers {
		if _, err := c.WaitDrained(within); err != nil {
			t.Fatalf("%s not drained within a minute of the restart: %v", term, err)
		}
	}
	t.Logf("%d events answered 2xx when the disk was lost (HQ had acknowledged %d rows); every till drained %v after the restart",
		atLoss, sent, time.Since(restart).Round(100*time.Millisecond))
	e.verify()
	dirs := map[string]string{}
	for term, a := range e.agents {
		dirs[term] = a.Opts.DataDir
	}
	n := checkTillFlows(t, dir, dirs)
	out, err := m.Terminals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Terminals {
		if len(r.SeqGaps) > 0 {
			t.Errorf("%s: seq gaps %+v, want none", r.Terminal, r.SeqGaps)
		}
	}
	mode, err := m.Mode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Redis kept its flow counters (never lowered): no number was given twice.
	if fx, err := m.FlowExceptions(context.Background(), "", true); err != nil || len(fx.Flows) != 0 {
		t.Errorf("flow exceptions %+v (%v), want none", fx.Flows, err)
	}
	// Every row HQ acknowledged was an event of the lost ledger: each came back as a replay.
	if mode.Stats.Resends == 0 || mode.Stats.Replayed < sent {
		t.Errorf("stats: %d resends, %d replayed; want at least the %d rows HQ had acknowledged replayed",
			mode.Stats.Resends, mode.Stats.Replayed, sent)
	}
	hq.waitUploaded(e.store, time.Minute)
	stopSup()
	<-supervised
	rows := hq.checkHQ(dir)
	if hq.starts < 2 {
		t.Errorf("the uploader was started %d times: it never met the empty ledger", hq.starts)
	}
	// The catch-up counters of GET /v1/mode are Prometheus counters too.
	mode, err = m.Mode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]int64{"resends_total": mode.Stats.Resends, "replayed_total": mode.Stats.Replayed,
		"held_behind_replays_total": mode.Stats.HeldBehindReplays} {
		if got, want := metricLine(t, e, "posgate_store_"+name+" "), fmt.Sprintf("posgate_store_%s %d", name, v); got != want {
			t.Errorf("metrics: %q, want %q (GET /v1/mode)", got, want)
		}
	}
	t.Logf("%d sales and refunds carry the till's flow number; %d resend requests, %d events replayed; HQ holds the ledger's %d sales and refunds %v after the restart (uploader started %d times)",
		n, mode.Stats.Resends, mode.Stats.Replayed, rows, time.Since(restart).Round(100*time.Millisecond), hq.starts)
}
