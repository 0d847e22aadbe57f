package serve_test

import (
	"encoding/json"
	"testing"

	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
)

// BenchmarkDecodeValidate is serve's own work on a batch before it stores it, without HTTP
// or a database: decoding a body of 5,000 sales of 10 terminals (DecodeBatch) and checking
// every row against its payload and the upload protocol's rules (Validate). ns/op is one
// batch; ns/row is per sale.
// go test -run '^$' -bench DecodeValidate -count 5 ./hq-sync/serve/
func BenchmarkDecodeValidate(b *testing.B) {
	var rows []hqwire.Row
	for t := range 10 {
		rows = append(rows, storetest.Sales("S01", "T"+string(rune('0'+t)), 1, 500, storetest.D1, storetest.T0)...)
	}
	body, err := json.Marshal(&hqwire.Batch{V: hqwire.Version, Store: "S01", ID: "S01-b1", SentAt: storetest.T0, Rows: rows})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		bt, err := serve.DecodeBatch(body)
		if err != nil {
			b.Fatal(err)
		}
		if err := serve.Validate(bt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
}
