package hqstore_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
)

// TestMethodsRoundTrip: any by_method map of the known methods reads back as it was
// split, zero amounts included.
func TestMethodsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := rapid.MapOf(rapid.SampledFrom([]string{"cash", "card", "qr"}),
			rapid.Custom(func(t *rapid.T) money.Fen { return money.Fen(rapid.Int64().Draw(t, "fen")) })).Draw(t, "by_method")
		c, err := hqstore.Split(m)
		if err != nil {
			t.Fatal(err)
		}
		got := c.Map()
		if len(m) == 0 {
			if got != nil {
				t.Fatalf("empty map read back as %v", got)
			}
			return
		}
		if !maps.Equal(got, m) {
			t.Fatalf("%v read back as %v", m, got)
		}
	})
}

func TestCheck(t *testing.T) {
	good := &hqwire.Batch{Store: "S1", ID: "b", Rows: []hqwire.Row{{BusinessDate: "2025-03-01", ByMethod: map[string]money.Fen{"cash": 1}}},
		Exceptions: []hqwire.Exception{ // one sale's oversells of two SKUs, and its refund's exception
			{Kind: hqwire.ExceptionOversell, Terminal: "T1", Seq: 1, SKU: "A", Change: 1},
			{Kind: hqwire.ExceptionOversell, Terminal: "T1", Seq: 1, SKU: "B", Change: 2},
			{Kind: hqwire.ExceptionRefund, Terminal: "T1", Seq: 1, Change: 3, Detail: "é"}}}
	if err := hqstore.Check(good, "h"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		b    *hqwire.Batch
		hash string
	}{
		"nil":            {nil, "h"},
		"no store":       {&hqwire.Batch{ID: "b"}, "h"},
		"no id":          {&hqwire.Batch{Store: "S1"}, "h"},
		"no hash":        {good, ""},
		"unknown method": {&hqwire.Batch{Store: "S1", ID: "b", Rows: []hqwire.Row{{ByMethod: map[string]money.Fen{"gold": 1}}}}, "h"},
		"unknown method in a day": {&hqwire.Batch{Store: "S1", ID: "b", Days: []hqwire.StoreDay{{Txns: []hqwire.Txn{
			{ByMethod: map[string]money.Fen{"gold": 1}}}}}}, "h"},
		"part above its parts": {&hqwire.Batch{Store: "S1", ID: "b", Days: []hqwire.StoreDay{
			{Part: 1, Parts: 2}, {BusinessDate: "2025-03-02", Part: 3, Parts: 2}}}, "h"},
		"part without parts": {&hqwire.Batch{Store: "S1", ID: "b", Days: []hqwire.StoreDay{{Part: 1}}}, "h"},
		"row without a date": {&hqwire.Batch{Store: "S1", ID: "b", Rows: []hqwire.Row{{}}}, "h"},
		"row of a date not YYYY-MM-DD": {&hqwire.Batch{Store: "S1", ID: "b", Rows: []hqwire.Row{
			{BusinessDate: "2025-3-1"}}}, "h"},
		"day of a date not YYYY-MM-DD": {&hqwire.Batch{Store: "S1", ID: "b", Days: []hqwire.StoreDay{
			{BusinessDate: "2025-03-01x"}}}, "h"},
		"exception twice": {&hqwire.Batch{Store: "S1", ID: "b", Exceptions: []hqwire.Exception{
			{Kind: hqwire.ExceptionRefund, Terminal: "T1", Seq: 1, Change: 1},
			{Kind: hqwire.ExceptionOversell, Terminal: "T1", Seq: 1, SKU: "A", Change: 2},
			{Kind: hqwire.ExceptionRefund, Terminal: "T1", Seq: 1, Change: 3}}}, "h"},
		"NUL in an exception's detail": {&hqwire.Batch{Store: "S1", ID: "b", Exceptions: []hqwire.Exception{
			{Kind: hqwire.ExceptionRefund, Terminal: "T1", Seq: 1, Change: 1, Detail: "a\x00b"}}}, "h"},
		"NUL in an exception's resolution": {&hqwire.Batch{Store: "S1", ID: "b", Exceptions: []hqwire.Exception{
			{Kind: hqwire.ExceptionRefund, Terminal: "T1", Seq: 1, Change: 1, Resolution: "\x00"}}}, "h"},
	} {
		err := hqstore.Check(c.b, c.hash)
		if perr.KindOf(err) != perr.Invalid || perr.CodeOf(err) != hqwire.CodeBatchInvalid {
			t.Errorf("%s: %v, want %s", name, err, hqwire.CodeBatchInvalid)
		}
	}
}

// TestDayParts: a whole declaration is part 1 of 1 without a split id; parts are numbered
// from 1 up to their number, at most hqwire.MaxDayParts, and carry a valid split id or none;
// anything else is batch_invalid.
func TestDayParts(t *testing.T) {
	for _, c := range []struct {
		part, parts         int
		split               string
		wantPart, wantParts int
	}{
		{0, 0, "", 1, 1}, {1, 1, "", 1, 1}, {1, 2, "s", 1, 2}, {2, 2, "a-Z_9", 2, 2}, {1, 2, "", 1, 2},
		{1, hqwire.MaxDayParts, "s", 1, hqwire.MaxDayParts}, {hqwire.MaxDayParts, hqwire.MaxDayParts, "s", hqwire.MaxDayParts, hqwire.MaxDayParts},
	} {
		part, parts, err := hqstore.DayParts(&hqwire.StoreDay{Part: c.part, Parts: c.parts, Split: c.split})
		if err != nil || part != c.wantPart || parts != c.wantParts {
			t.Errorf("part %d of %d: (%d, %d, %v), want (%d, %d)", c.part, c.parts, part, parts, err, c.wantPart, c.wantParts)
		}
	}
	for _, c := range []struct {
		part, parts int
		split       string
	}{
		{1, 0, "s"}, {0, 1, "s"}, {0, 2, "s"}, {3, 2, "s"}, {-1, 2, "s"}, {1, -1, "s"}, {-1, -1, "s"},
		{1, hqwire.MaxDayParts + 1, "s"}, {hqwire.MaxDayParts + 1, hqwire.MaxDayParts + 1, "s"},
		{2, 2, "a b"}, {1, 2, strings.Repeat("s", 65)}, {0, 0, "s"}, {1, 1, "s"},
	} {
		_, _, err := hqstore.DayParts(&hqwire.StoreDay{Part: c.part, Parts: c.parts, Split: c.split})
		if perr.KindOf(err) != perr.Invalid || perr.CodeOf(err) != hqwire.CodeBatchInvalid {
			t.Errorf("part %d of %d split %q: %v, want %s", c.part, c.parts, c.split, err, hqwire.CodeBatchInvalid)
		}
	}
}

func TestInterner(t *testing.T) {
	in := hqstore.Interner{}
	a := in.Bytes([]byte("S0001"))
	b := in.String(string([]byte("S0001")))
	if a != b || len(in) != 1 {
		t.Fatalf("interned %q and %q into %d strings", a, b, len(in))
	}
	if hqstore.DayStored(3, 3) || hqstore.DayStored(3, 2) || !hqstore.DayStored(0, 1) || !hqstore.DayStored(2, 3) {
		t.Fatal("DayStored")
	}
}

// TestTimeText: a time a store sent reads back as the same instant, in UTC; none reads
// back as none.
func TestTimeText(t *testing.T) {
	for _, at := range []time.Time{{}, time.Date(2025, 3, 1, 10, 0, 0, 123456789, time.FixedZone("UTC+08:00", 8*3600))} {
		got, err := hqstore.ParseTime(hqstore.TimeText(at))
		if err != nil || !got.Equal(at) || got.Location() != time.UTC {
			t.Errorf("%v read back as %v (%v)", at, got, err)
		}
	}
	if s := hqstore.TimeText(time.Time{}); s != "" {
		t.Errorf("no time written %q", s)
	}
}

func TestHeldAndDropped(t *testing.T) {
	held := hqstore.Held(hqstore.Held(nil, "2025-03-01", 3), "2025-03-01", 2)
	dropped := hqstore.Dropped(hqstore.Dropped(nil, "2025-03-01", 3), "2025-03-02", 1)
	if !maps.Equal(held, map[string]int64{"2025-03-01": 3}) || !maps.Equal(dropped, map[string]int64{"2025-03-01": 3, "2025-03-02": 1}) {
		t.Fatalf("held %v, dropped %v", held, dropped)
	}
}
