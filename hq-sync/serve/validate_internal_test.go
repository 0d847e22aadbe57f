package serve

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// TestSameTender: sameTender, which HQ checks every sale with, answers as comparing the
// sale's Tendered map with the row's split (sameFigures) does, for any payments, change
// and split, a method missing from either standing for 0, a method no sale may name too.
func TestSameTender(t *testing.T) {
	methods := []string{wire.MethodCash, wire.MethodCard, wire.MethodQR, "voucher"}
	amount := rapid.Custom(func(t *rapid.T) money.Fen { return money.Fen(rapid.Int64Range(0, 3).Draw(t, "fen")) })
	rapid.Check(t, func(t *rapid.T) {
		var p wire.SalePayload
		for range rapid.IntRange(0, 4).Draw(t, "payments") {
			p.Payments = append(p.Payments, wire.Payment{Method: rapid.SampledFrom(methods).Draw(t, "method"), Amount: amount.Draw(t, "amount")})
		}
		p.Change = amount.Draw(t, "change")
		by := map[string]money.Fen{}
		for range rapid.IntRange(0, 4).Draw(t, "split") {
			by[rapid.SampledFrom(methods).Draw(t, "by")] = amount.Draw(t, "by amount")
		}
		if got, want := sameTender(&p, by), sameFigures(p.Tendered(), by); got != want {
			t.Fatalf("sameTender = %v, sameFigures(Tendered) = %v; payments %+v change %s split %v", got, want, p.Payments, p.Change, by)
		}
	})
}
