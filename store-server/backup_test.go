package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestBackupRestores: GET /v1/backup sends a copy of the ledger, made while the store goes
// on writing, holding every change made before it was asked for. A store-server started on
// that copy, with an empty Redis, trades from it: the stock is the ledger's as of the
// backup, and what came after it is not there.
func TestBackupRestores(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.importCSV(t, []byte("sku,name,price\nA1,Apple,1.00\nB2,Bread,2.50\n"))
	if _, applied := srv.adjust(t, "open-A1", "A1", 100, ledger.ReasonOpening); !applied {
		t.Fatal("opening A1 not applied")
	}

	// Adjustments of B2 go on while the backup is made: the copy holds a whole prefix of
	// them, each at its own quantity.
	// B2 in the ledger as the adjustments go on (Redis follows each a moment later: not
	// compared here).
	b2Now := func() int64 {
		out := must[client.StockAnswer](t, "stock")(srv.manager().Stock(context.Background(), false))
		for _, r := range out.Stock {
			if r.SKU == "B2" {
				return r.Ledger
			}
		}
		return 0
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			srv.adjust(t, fmt.Sprintf("b2-%d", i), "B2", 1, ledger.ReasonAdjust)
		}
	})
	for b2Now() < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	before := b2Now()
	status, h, body := srv.do(t, "GET", "/v1/backup", biToken, "", nil)
	close(stop)
	wg.Wait()
	if status != http.StatusOK {
		t.Fatalf("backup: %d %s", status, body)
	}
	if ct, cd := h.Get("Content-Type"), h.Get("Content-Disposition"); ct != "application/x-tar" ||
		!strings.HasPrefix(cd, `attachment; filename="posgate-S1-`) || !strings.HasSuffix(cd, `.tar"`) {
		t.Fatalf("backup headers: Content-Type %q, Content-Disposition %q", ct, cd)
	}
	if cl := h.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Fatalf("backup of %d bytes, Content-Length %s", len(body), cl)
	}
	if left, _ := filepath.Glob(filepath.Join(srv.Main.DataDir, ".backup-*")); len(left) != 0 {
		t.Fatalf("copies left in the data directory: %v", left)
	}
	// After the backup: not in it.
	if qty, applied := srv.adjust(t, "shrink-A1", "A1", -40, ledger.ReasonAdjust); qty != 60 || !applied {
		t.Fatalf("A1 after the backup: %d %v", qty, applied)
	}

	// Restored as docs/store-server.md says: the tar unpacked into an empty data directory.
	dir := t.TempDir()
	var names []string
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if hd.Name == ledger.FileName && !bytes.HasPrefix(b, []byte("SQLite format 3\x00")) {
			t.Fatalf("%s in the backup is not a SQLite database: %q…", hd.Name, b[:min(len(b), 16)])
		}
		names = append(names, hd.Name)
		if err := os.WriteFile(filepath.Join(dir, hd.Name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"ledger.db", "catalog.json", "catalog.json.skus", "catalog-key.pem", "catalog-key.pub"}; !slices.Equal(names, want) {
		t.Fatalf("files in the backup: %v, want %v", names, want)
	}
	restored := biRunServer(t, "--data-dir", dir)
	stock := restored.stock(t)
	for sku, row := range stock { // Redis rebuilt from the restored ledger
		if row.Redis == nil || *row.Redis != row.Ledger {
			t.Fatalf("%s in the restored store: ledger %d, redis %v", sku, row.Ledger, biDeref(row.Redis))
		}
	}
	if got := stock["A1"].Ledger; got != 100 {
		t.Fatalf("A1 in the restored store: %d, want 100 (the adjustment after the backup is not in it)", got)
	}
	b2 := stock["B2"].Ledger
	t.Logf("B2 in the backup: %d adjustments; %d were made before it was asked for", b2, before)
	if b2 < before {
		t.Fatalf("B2 in the backup: %d, but %d adjustments were made before it was asked for", b2, before)
	}
	// Each adjustment the copy holds is the one of its id: adjusting again by a held id
	// changes nothing, by the next id it applies.
	if b2 > 0 {
		if qty, applied := restored.adjust(t, fmt.Sprintf("b2-%d", b2), "B2", 1, ledger.ReasonAdjust); applied || qty != b2 {
			t.Fatalf("adjustment b2-%d again on the restored store: qty %d applied %v, want %d false", b2, qty, applied, b2)
		}
	}
	if qty, applied := restored.adjust(t, fmt.Sprintf("b2-%d", b2+1), "B2", 1, ledger.ReasonAdjust); !applied || qty != b2+1 {
		t.Fatalf("adjustment b2-%d on the restored store: qty %d applied %v, want %d true", b2+1, qty, applied, b2+1)
	}
}

// TestBackupFromTheDashboard: the dashboard's Download backup button fetches the backup
// with the manager's token and says what it handed to the browser.
func TestBackupFromTheDashboard(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.click("#backup")
	b.waitText("#backup-status", " bytes")
	got := b.text("#backup-status")
	name, size, ok := strings.Cut(strings.TrimSuffix(got, " bytes"), ": ")
	if n, err := strconv.Atoi(size); !ok || err != nil || n < 1024 || !strings.HasPrefix(name, "posgate-S1-") ||
		!strings.HasSuffix(name, ".tar") {
		t.Fatalf("backup status %q, want posgate-S1-….tar: N bytes", got)
	}
}
