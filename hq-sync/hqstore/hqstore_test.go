package hqstore_test

import (
	"maps"
	"testing"

	"github.com/posgate/posgate/hq-sync/hq"
	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"pgregory.net/rapid"
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
	good := &hq.Batch{Store: "S1", ID: "b", Rows: []hq.Row{{ByMethod: map[string]money.Fen{"cash": 1}}}}
	if err := hqstore.Check(good, "h"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		b    *hq.Batch
		hash string
	}{
		"nil":            {nil, "h"},
		"no store":       {&hq.Batch{ID: "b"}, "h"},
		"no id":          {&hq.Batch{Store: "S1"}, "h"},
		"no hash":        {good, ""},
		"unknown method": {&hq.Batch{Store: "S1", ID: "b", Rows: []hq.Row{{ByMethod: map[string]money.Fen{"gold": 1}}}}, "h"},
		"unknown method in a day": {&hq.Batch{Store: "S1", ID: "b", Days: []hq.StoreDay{{Txns: []hq.Txn{
			{ByMethod: map[string]money.Fen{"gold": 1}}}}}}, "h"},
	} {
		err := hqstore.Check(c.b, c.hash)
		if perr.KindOf(err) != perr.Invalid || perr.CodeOf(err) != hqstore.CodeBatchInvalid {
			t.Errorf("%s: %v, want %s", name, err, hqstore.CodeBatchInvalid)
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
