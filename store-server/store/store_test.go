package store_test

import (
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
)

func TestCountersAdd(t *testing.T) {
	var sum store.Counters // nil maps: Add makes them
	sum.Add(store.Counters{Sales: 2, Amount: 1250, ByMethod: map[string]money.Fen{wire.MethodCash: 1000, wire.MethodCard: 250}})
	sum.Add(store.Counters{Sales: 1, Amount: 99, ByMethod: map[string]money.Fen{wire.MethodCash: 99},
		Refunds: 1, RefundAmount: 50, RefundByMethod: map[string]money.Fen{wire.MethodCard: 50}})
	sum.Add(store.Counters{})
	want := store.Counters{Sales: 3, Amount: 1349, ByMethod: map[string]money.Fen{wire.MethodCash: 1099, wire.MethodCard: 250},
		Refunds: 1, RefundAmount: 50, RefundByMethod: map[string]money.Fen{wire.MethodCard: 50}}
	if !sum.Equal(want) || len(sum.ByMethod) != 2 || len(sum.RefundByMethod) != 1 {
		t.Fatalf("sum %+v, want %+v", sum, want)
	}
}
