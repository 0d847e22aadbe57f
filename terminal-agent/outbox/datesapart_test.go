package outbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestDatesApartAfterTheZoneIsSetRight: a till whose --tz was UTC+08:00 in a store on UTC
// dates an event at 01:30 on another day than the store: DatesApart says so. Its --tz set
// right (the store's zone) and the agent started again, DatesApart says nothing at once:
// the events dated under the zone it had are no longer what the till does. It kept saying
// so until 5,000 later events had pushed them out of its window, and the till's support
// took the fix for one that did not work.
func TestDatesApartAfterTheZoneIsSetRight(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	at := time.Date(2026, 11, 30, 1, 30, 0, 0, time.FixedZone("UTC+08:00", 8*3600))
	scanAcked := func(loc *time.Location, storeDate string) *Store {
		t.Helper()
		s, err := Open(ctx, path, Config{Store: "S1", Terminal: "T1", Location: loc, Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if _, err := s.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 1,
			Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
			t.Fatal(err)
		}
		sale, _, _, err := s.Do(ctx, "", "", Mode{Disconnected: true}, func(tx *Tx) (string, error) { return tx.OpenSale() })
		if err != nil {
			t.Fatal(err)
		}
		_, seq, _, err := s.Do(ctx, "", "", Mode{Disconnected: true}, func(tx *Tx) (string, error) {
			_, err := tx.AddLine(sale, "MILK", "", 1)
			return sale, err
		})
		if err != nil || seq == 0 {
			t.Fatalf("scan: seq %d, %v", seq, err)
		}
		ack := wire.Ack{Seq: seq, Key: wire.Key("T1", seq), Status: wire.AckAccepted, Result: &wire.Result{BusinessDate: storeDate}}
		if _, err := s.Apply(ctx, []Transition{{Seq: seq, Ack: ack, Action: Ack}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := scanAcked(time.FixedZone("UTC+08:00", 8*3600), "2026-11-29")
	if d, err := s.DatesApart(ctx); err != nil || d == nil || d.Events != 1 || d.TillDate != "2026-11-30" || d.StoreDate != "2026-11-29" {
		t.Fatalf("dates apart under the wrong zone: %+v, %v", d, err)
	}
	s.Close()

	s = scanAcked(time.UTC, "2026-11-29") // set right: the till dates as the store does
	if d, err := s.DatesApart(ctx); err != nil || d != nil {
		t.Fatalf("dates apart once the till's zone is the store's: %+v, %v; want none", d, err)
	}
}
