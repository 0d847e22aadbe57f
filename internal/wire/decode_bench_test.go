package wire

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
)

// benchSaleEnvelope is an encoded 3-line cash sale, as a terminal sends it.
func benchSaleEnvelope(tb testing.TB, seq int64) []byte {
	at := time.Date(2026, 11, 29, 10, 30, 0, 123456789, time.UTC)
	p := SalePayload{SaleID: fmt.Sprintf("T01-%d", seq), OpenedAt: at.Add(-time.Minute)}
	for i := range 3 {
		price := money.Fen(150 * (i + 3))
		p.Lines = append(p.Lines, Line{Line: i + 1, SKU: fmt.Sprintf("SKU%02d", i+1), Name: fmt.Sprintf("Item %02d", i+1),
			Qty: int64(1 + i%2), UnitPrice: price, Amount: price * money.Fen(1+i%2)})
		p.Total += price * money.Fen(1+i%2)
	}
	p.Payments = []Payment{{Method: MethodCash, Amount: 5000}}
	p.Change = 5000 - p.Total
	body, err := json.Marshal(&p)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := json.Marshal(NewEnvelope(KindSale, "S001", "T01", seq, at, body))
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// decodeAll is what the store does with an up message before deciding it.
func decodeAll(b *testing.B, msg []byte) {
	up, err := DecodeUp(msg)
	if err != nil {
		b.Fatal(err)
	}
	for _, it := range up.Items {
		if it.Err != nil {
			b.Fatal(it.Err)
		}
		if _, err := DecodePayload(it.Env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeUp decodes and checks an up message with its payloads: a single live sale,
// and a batch of 250 (ns/op is per message; see events/s).
func BenchmarkDecodeUp(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		msg := benchSaleEnvelope(b, 1)
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			decodeAll(b, msg)
		}
	})
	b.Run("batch250", func(b *testing.B) {
		events := make([]json.RawMessage, 250)
		for i := range events {
			events[i] = benchSaleEnvelope(b, int64(i+1))
		}
		msg, err := MarshalBatch("S001", "T01", events)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			decodeAll(b, msg)
		}
		b.ReportMetric(float64(b.N*len(events))/b.Elapsed().Seconds(), "events/s")
	})
}
