package uploadstate_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// TestReadStatusOf: a state no uploader has made yet is fs.ErrNotExist (the store-server
// shows "not found", not an error); a state the uploader holds open reads while it is open,
// with nothing sent of an empty ledger; another store's state is refused; and a second Open
// of a held state fails with sqlitedb.ErrInUse.
func TestReadStatusOf(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	loc, err := wire.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(ctx, filepath.Join(dir, "ledger.db"), "S1", loc)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	path := filepath.Join(dir, "upload.db")
	if _, err := uploadstate.ReadStatusOf(ctx, path, l); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no state yet: %v, want fs.ErrNotExist", err)
	}

	st, err := uploadstate.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.W.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('store_id', 'S1')`); err != nil {
		t.Fatal(err)
	}
	kv, err := uploadstate.ReadKV(ctx, st.R)
	if err != nil || kv["store_id"] != "S1" || len(kv["batch_series"]) != 8 {
		t.Fatalf("kv %v (%v), want the store and a batch series of 8 hex digits", kv, err)
	}
	s, err := uploadstate.ReadStatusOf(ctx, path, l)
	if err != nil {
		t.Fatalf("the state the uploader holds: %v", err)
	}
	if s.SentThrough != 0 || s.Backlog != 0 || s.Pending != "" || s.Batches != 0 || !s.LastSentAt.IsZero() ||
		s.Declared == nil || len(s.Declared) != 0 || s.LedgerBehindHQ {
		t.Errorf("a new state of an empty ledger: %+v", s)
	}
	if _, err := uploadstate.Open(ctx, path); !errors.Is(err, sqlitedb.ErrInUse) {
		t.Errorf("a second Open of a held state: %v, want sqlitedb.ErrInUse", err)
	}

	other, err := ledger.Open(ctx, filepath.Join(dir, "other.db"), "S2", loc)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := uploadstate.ReadStatusOf(ctx, path, other); err == nil || !strings.Contains(err.Error(), `store "S1", not "S2"`) {
		t.Errorf("another store's state: %v", err)
	}
}
