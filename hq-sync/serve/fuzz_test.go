package serve_test

import (
	"encoding/json"
	"testing"

	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
)

// FuzzDecodeBatch feeds arbitrary bodies to the decoder and the validator: they must never
// panic, and every refusal is a coded perr.Invalid error.
// go test -run '^$' -fuzz FuzzDecodeBatch -fuzztime 30s ./hq-sync/serve/
func FuzzDecodeBatch(f *testing.F) {
	rows := storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0)
	rows = append(rows, storetest.DayClose("S1", "T1", 4, storetest.D1, storetest.T0, rows))
	b, _ := storetest.NewBatch("S1", "b-1", rows, storetest.Day(storetest.D1, 1, storetest.T0, rows))
	good, err := json.Marshal(b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	b.Exceptions = []hqwire.Exception{
		storetest.Oversell("T1", 1, "SKU-0001", storetest.D1, storetest.T0, 2, 1),
		storetest.Resolved(storetest.RefundException("T1", 2, storetest.D1, storetest.T0, "refund_sale_unknown", "d", 2),
			storetest.T0, "r", 3),
		storetest.Withdrawn(storetest.Oversell("T1", 3, "SKU-0002", storetest.D1, storetest.T0, 1, 4), 5),
	}
	withExceptions, err := json.Marshal(b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(withExceptions)
	f.Add([]byte(`{"v":1,"store":"S1","batch_id":"b","rows":[],"sent_at":"2025-03-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"rows":[{"kind":"sale","amount":"1.00","by_method":{"cash":"1.00"}}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := serve.DecodeBatch(body)
		if err != nil {
			if perr.KindOf(err) != perr.Invalid || perr.CodeOf(err) != hqwire.CodeJSONInvalid {
				t.Fatalf("decode error %v is not json_invalid", err)
			}
			return
		}
		if err := serve.Validate(b); err != nil {
			if perr.KindOf(err) != perr.Invalid || perr.CodeOf(err) != hqwire.CodeBatchInvalid {
				t.Fatalf("validation error %v is not batch_invalid", err)
			}
			return
		}
		if b.V != hqwire.Version || len(b.Rows) > hqwire.MaxBatchRows || len(b.Exceptions) > hqwire.MaxBatchExceptions {
			t.Fatalf("accepted batch %+v", b)
		}
	})
}
