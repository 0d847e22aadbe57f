package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRestoreUnderLoadLosesNoSale: three tills sell under a cashier load on a store with a
// Redis Sentinel trio and mosquitto; a backup is taken through GET /v1/backup, the tills
// keep selling (catchupSelling), the store-server is SIGKILLed, its data directory
// destroyed and the backup restored, and it is started again while the tills go on selling.
// Within a minute the ledger holds every event each till was answered 2xx for, exactly
// once, each sale and refund with the flow number the till holds (its receipt's); till =
// ledger = Redis per terminal and day, stock agrees; no seq gap is recorded. The store's
// uploader, its state kept, refuses the restored ledger while it lacks HQ's last row and
// goes on by itself once the tills refilled it: HQ then holds the ledger's every sale and
// refund with its flow number and amount.
func TestRestoreUnderLoadLosesNoSale(t *testing.T) {
	t.Parallel() // mostly a cashier load's waiting: it runs beside the other long restores
	e := newEnv(t, "Asia/Shanghai", []string{"T01", "T02", "T03"})
	dir := e.store.Opts.DataDir
	hq := startHQ(t, binaries(t), dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wg := e.load(ctx)
	time.Sleep(3 * time.Second)
	body := backupOf(t, e.store)
	atBackup := len(e.allOK())
	time.Sleep(catchupSelling)
	lostWith := len(e.allOK()) - atBackup

	hq.up.Kill()
	e.store.Kill()
	// The uploader's state is kept (as on a disk of its own): HQ holds rows the backup lacks.
	state := keepFiles(t, dir, "upload.db", "upload.db-wal")
	if err := os.RemoveAll(dir); err != nil { // the disk is gone
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	unpackBackup(t, body, dir)
	putFiles(t, dir, state)
	restart := time.Now()
	if err := e.store.Restart(context.Background()); err != nil {
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
	t.Logf("%d events answered 2xx before the backup, %d in the %v after it (lost with the disk); every till drained %v after the restart",
		atBackup, lostWith, catchupSelling, time.Since(restart).Round(100*time.Millisecond))
	if lostWith == 0 {
		t.Fatal("no event was answered 2xx after the backup: the load did not run")
	}
	e.verify()
	dirs := map[string]string{}
	for term, a := range e.agents {
		dirs[term] = a.Opts.DataDir
	}
	n := checkTillFlows(t, dir, dirs)
	out, err := e.store.Manager().Terminals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Terminals {
		if len(r.SeqGaps) > 0 {
			t.Errorf("%s: seq gaps %+v, want none", r.Terminal, r.SeqGaps)
		}
	}
	mode, err := e.store.Manager().Mode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if mode.Stats.Resends == 0 || mode.Stats.Replayed == 0 {
		t.Errorf("stats: %d resends, %d replayed; the tills were never asked", mode.Stats.Resends, mode.Stats.Replayed)
	}
	t.Logf("%d sales and refunds carry the till's flow number in the ledger; %d resend requests, %d events replayed",
		n, mode.Stats.Resends, mode.Stats.Replayed)

	// The uploader goes on by itself once the ledger caught up: HQ = ledger, row by row.
	hq.waitUploaded(e.store, time.Minute)
	stopSup()
	<-supervised
	rows := hq.checkHQ(dir)
	t.Logf("HQ holds the ledger's %d sales and refunds with their flow numbers and amounts %v after the restart (uploader started %d times)",
		rows, time.Since(restart).Round(100*time.Millisecond), hq.starts)
}

// keepFiles reads the named files of dir that exist.
func keepFiles(t *testing.T, dir string, names ...string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err == nil {
			out[n] = b
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return out
}

// putFiles writes files into dir.
func putFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// catchupSelling is how long the tills sell between the backup and the loss of the disk:
// 60 s, as a store that loses its disk a minute after its last backup.
const catchupSelling = 60 * time.Second

// allOK returns the keys of every event any till was answered 2xx for.
func (e *env) allOK() map[string]bool {
	m := map[string]bool{}
	for _, c := range e.cashiers {
		for k := range c.OK() {
			m[k] = true
		}
	}
	return m
}
