package serve

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
)

// FuzzDecodeBatchLikeEncodingJSON holds DecodeBatch, which decodes with segmentio/encoding/json first, to
// the verdicts of encoding/json alone: the same documents accepted, decoded alike, and
// the same refused. go test -run '^$' -fuzz FuzzDecodeBatchLikeEncodingJSON -fuzztime 30s ./hq-sync/serve/
func FuzzDecodeBatchLikeEncodingJSON(f *testing.F) {
	rows := storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0)
	rows = append(rows, storetest.DayClose("S1", "T1", 4, storetest.D1, storetest.T0.Add(time.Hour), rows))
	b, _ := storetest.ExceptionBatch("S1", "b-1", rows, storetest.Oversell("T1", 2, "SKU-1", storetest.D1, storetest.T0, 1, 7))
	b.Days = []hqwire.StoreDay{storetest.Day(storetest.D1, 1, storetest.T0, rows)}
	good, err := json.Marshal(b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, s := range []string{
		`{}`, `[]`, `null`, `{"v":1,"store":"S1","batch_id":"b","rows":[]} x`, `{"v":1,"nope":1}`,
		`{"rows":[{"amount":12.30}]}`, `{"rows":[{"amount":"12.305"}]}`, `{"rows":[{"by_method":{"cash":"1.00","x":"1"}}]}`,
		`{"rows":[{"at":"yesterday"}]}`, `{"rows":[{"payload":{"a":[1,2,{"b":null}]}}]}`, `{"days":[{"txns":[{"extra":1}]}]}`,
		`{"v":1,"v":2}`, "{\"store\":\"\xff\"}", `{"rows":[{"seq":1e3}]}`, `{"rows":[{"seq":-0}]}`, `{"store":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gerr := DecodeBatch(body)
		var want hqwire.Batch
		werr := decodeStrict(body, &want)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("DecodeBatch: %v; encoding/json: %v", gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(*got, want) {
			t.Fatalf("decoded apart:\n got %+v\nwant %+v", *got, want)
		}
	})
}
