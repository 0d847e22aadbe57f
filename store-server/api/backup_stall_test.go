package api_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/store-server/api"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestBackupOfAStalledDownloadEnds: a client that asks for a backup and then stops reading
// (a browser's paused download, a pipe into a program that hangs) while keeping its
// connection open does not hold the store's backup for good. The download is dropped once
// it makes no progress for Server.BackupStall: the next backup is made (not 409
// backup_running), and the copy of the ledger is not left taking room in the data directory.
func TestBackupOfAStalledDownloadEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, ledger.FileName)
	led, err := ledger.Open(ctx, path, "S1", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	led.Close()
	// A ledger larger than what the sockets between the two ends hold (the client's receive
	// buffer is kept small below; the server's send buffer grows to 4 MiB at most).
	db, err := sql.Open("sqlite3_posgate", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE pad (b BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 24)
		INSERT INTO pad SELECT randomblob(1 << 20) FROM n`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if led, err = ledger.Open(ctx, path, "S1", time.UTC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	cat, err := catalog.Open(catalog.DefaultPath(dir), "S1")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer((&api.Server{Token: "tok", Store: "S1", Ledger: led, Catalog: cat, Now: time.Now,
		Logger: log, BackupStall: 300 * time.Millisecond}).Handler())
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /v1/backup HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n\r\n")
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("stalled backup: %q %v", status, err)
	}
	// The client reads no more, and keeps its connection.

	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/backup", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Logf("a backup of %d bytes after the stalled one", n)
			break
		}
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("backup while another's download is stalled: %d (still after 10 s: the stalled one holds it)",
				resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		left, _ := filepath.Glob(filepath.Join(dir, ".backup-*"))
		if len(left) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the stalled backup's copy of the ledger is left in the data directory")
}

// TestBackupThroughAWriterWithoutDeadlines: a response writer that takes no write deadline
// (a middleware's, a recorder) gets the whole backup, sent without one.
func TestBackupThroughAWriterWithoutDeadlines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	led, err := ledger.Open(context.Background(), filepath.Join(dir, ledger.FileName), "S1", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := (&api.Server{Token: "tok", Store: "S1", Ledger: led, Now: time.Now, Logger: log}).Handler()
	req := httptest.NewRequest("GET", "/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer tok")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if cl := rec.Header().Get("Content-Length"); rec.Code != http.StatusOK || cl != fmt.Sprint(rec.Body.Len()) {
		t.Fatalf("backup: %d, %d bytes of Content-Length %s", rec.Code, rec.Body.Len(), cl)
	}
}
