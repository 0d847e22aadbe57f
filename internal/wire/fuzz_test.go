package wire_test

import (
	"bytes"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// wireCodes are the codes the decoders of envelopes and up messages may return.
var wireCodes = map[string]bool{
	wire.CodeSyntax: true, wire.CodeType: true, wire.CodeUnknownField: true, wire.CodeMissing: true,
	wire.CodeVersion: true, wire.CodeKind: true, wire.CodeOversize: true, wire.CodeID: true,
	wire.CodeSeq: true, wire.CodeKey: true, wire.CodeHash: true, wire.CodeMismatch: true, wire.CodeTime: true,
}

// payloadCodes are the codes DecodePayload may return in addition to wireCodes.
var payloadCodes = map[string]bool{
	wire.CodePayload: true, wire.CodeQuantity: true, wire.CodeAmount: true, wire.CodeMethod: true, wire.CodeTooLarge: true,
	money.CodeEmpty: true, money.CodeSyntax: true, money.CodeSubFen: true, money.CodeOverflow: true,
	money.CodeNegative: true, money.CodeNotPositive: true,
}

// checkErr fails unless err is a perr.Invalid error with one of the codes in sets.
func checkErr(t *testing.T, what string, err error, sets ...map[string]bool) {
	t.Helper()
	if perr.KindOf(err) != perr.Invalid {
		t.Fatalf("%s: error %v has kind %q, want %q", what, err, perr.KindOf(err), perr.Invalid)
	}
	code := perr.CodeOf(err)
	for _, s := range sets {
		if s[code] {
			return
		}
	}
	t.Fatalf("%s: unexpected code %q (err: %v)", what, code, err)
}

// validEnvelopes are good encoded envelopes of every kind, online and offline, and one whose
// time is not in UTC.
func validEnvelopes(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for i, k := range allKinds {
		env := wire.NewEnvelope(k, testStore, testTerm, int64(i+1), testAt, []byte(validPayloads[k]))
		out = append(out, mustMarshal(tb, env))
		env.Offline = true
		out = append(out, mustMarshal(tb, env))
	}
	east := wire.NewEnvelope(wire.KindSale, "S", "t", 9, testAt.In(time.FixedZone("", 8*3600)), []byte(saleJSON))
	return append(out, mustMarshal(tb, east))
}

func FuzzDecodeEnvelope(f *testing.F) {
	for _, b := range validEnvelopes(f) {
		f.Add(b)
	}
	for _, c := range envelopeRejections(f) {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := wire.DecodeEnvelope(b)
		if err != nil {
			checkErr(t, "DecodeEnvelope", err, wireCodes)
			return
		}
		if len(b) > wire.MaxEventBytes {
			t.Fatalf("accepted an envelope of %d bytes", len(b))
		}
		if err := env.Check(); err != nil {
			t.Fatalf("decoded envelope fails Check: %v", err)
		}
		if env.Payload[0] != '{' {
			t.Fatalf("accepted payload %q that is not an object", env.Payload)
		}
		b2, err := json.Marshal(env)
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		env2, err := wire.DecodeEnvelope(b2)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b2, err)
		}
		if env2.Key != env.Key || env2.Hash != env.Hash || env2.Seq != env.Seq || env2.Kind != env.Kind ||
			env2.Store != env.Store || env2.Terminal != env.Terminal || !env2.At.Equal(env.At) ||
			env2.Offline != env.Offline || !jsonEqual(env2.Payload, env.Payload) {
			t.Fatalf("re-decode changed the envelope:\n got %+v\nwant %+v", env2, env)
		}
		// DecodePayload must not panic on whatever payload got through, and report coded errors.
		if _, err := wire.DecodePayload(env); err != nil {
			checkErr(t, "DecodePayload", err, wireCodes, payloadCodes)
		}
	})
}

func FuzzDecodeUp(f *testing.F) {
	for _, b := range validEnvelopes(f) {
		f.Add(b)
	}
	for _, c := range envelopeRejections(f) {
		f.Add(c.in)
	}
	e1, e2, e3 := sealed(f, 1), sealed(f, 2), sealed(f, 3)
	badHash := bytes.Replace(e2, []byte(`"qty":2`), []byte(`"qty":3`), 1)
	other := sealedAt(f, wire.KindScan, testStore, "T_2", 2, scanJSON)
	f.Add(batchJSON(f, 1, testStore, testTerm, e1, e2, e3))
	f.Add(batchJSON(f, 1, testStore, testTerm, e1, badHash, e3))
	f.Add(batchJSON(f, 1, testStore, testTerm, e1, other))
	f.Add(batchJSON(f, 1, testStore, testTerm))
	f.Add(batchJSON(f, 2, testStore, testTerm, e1))
	f.Add(batchJSON(f, 1, "a/b", testTerm, e1))
	f.Add(batchJSON(f, 1, testStore, testTerm, []byte(`5`), []byte(`null`), []byte(`{"seq":7,"terminal":"T_1"}`)))
	f.Add([]byte(`{"v":1,"kind":"batch","store":"s","terminal":"t","events":[{}],"x":1}`))
	f.Add([]byte(`{"kind":5}`))
	f.Add([]byte(`{"kind":"batch"}`))
	tooMany := make([][]byte, wire.MaxBatchEvents+1)
	for i := range tooMany {
		tooMany[i] = []byte(`{}`)
	}
	f.Add(batchJSON(f, 1, testStore, testTerm, tooMany...))
	f.Fuzz(func(t *testing.T, b []byte) {
		up, err := wire.DecodeUp(b)
		if err != nil {
			checkErr(t, "DecodeUp", err, wireCodes)
			return
		}
		if len(up.Items) == 0 || (!up.Batch && len(up.Items) != 1) || len(up.Items) > wire.MaxBatchEvents {
			t.Fatalf("DecodeUp gave %d items (batch %v)", len(up.Items), up.Batch)
		}
		if up.Batch && (!wire.ValidID(up.Store) || !wire.ValidID(up.Terminal)) {
			t.Fatalf("batch accepted with ids %q %q", up.Store, up.Terminal)
		}
		for i, it := range up.Items {
			if it.Err != nil {
				checkErr(t, "item", it.Err, wireCodes)
				if it.Seq < 0 {
					t.Fatalf("item %d: recovered seq %d", i, it.Seq)
				}
				continue
			}
			if err := it.Env.Check(); err != nil {
				t.Fatalf("item %d has no Err but fails Check: %v", i, err)
			}
			if it.Seq != it.Env.Seq || it.Key != it.Env.Key {
				t.Fatalf("item %d: seq/key %d %q, envelope %d %q", i, it.Seq, it.Key, it.Env.Seq, it.Env.Key)
			}
			if it.Env.Store != up.Store || it.Env.Terminal != up.Terminal {
				t.Fatalf("item %d from %s/%s in a message of %s/%s", i, it.Env.Store, it.Env.Terminal, up.Store, up.Terminal)
			}
		}
	})
}

func FuzzDecodePayload(f *testing.F) {
	f.Add([]byte(saleJSON))
	for _, c := range saleCases() {
		f.Add(mutated(f, saleJSON, c.f))
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := wire.DecodePayload(wire.Envelope{Kind: wire.KindSale, Payload: b})
		if err != nil {
			checkErr(t, "DecodePayload", err, wireCodes, payloadCodes)
			return
		}
		s, ok := p.(*wire.SalePayload)
		if !ok {
			t.Fatalf("DecodePayload returned %T", p)
		}
		checkSale(t, s)
		// What was accepted encodes and decodes to the same thing.
		b2 := mustMarshal(t, s)
		p2, err := wire.DecodePayload(wire.Envelope{Kind: wire.KindSale, Payload: b2})
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b2, err)
		}
		if b3 := mustMarshal(t, p2); !bytes.Equal(b2, b3) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", b2, b3)
		}
	})
}

// checkSale verifies the sale invariants independently of Validate, in exact big integers.
func checkSale(t *testing.T, s *wire.SalePayload) {
	t.Helper()
	if len(s.Lines) == 0 || len(s.Lines) > wire.MaxLines || len(s.Payments) == 0 || len(s.Payments) > wire.MaxPayments {
		t.Fatalf("accepted %d lines and %d payments", len(s.Lines), len(s.Payments))
	}
	fen := func(f money.Fen) *big.Int { return big.NewInt(int64(f)) }
	sum := new(big.Int)
	for _, l := range s.Lines {
		if l.Qty < 1 || l.Qty > wire.MaxQty || l.UnitPrice < 0 {
			t.Fatalf("accepted line %+v", l)
		}
		if want := new(big.Int).Mul(fen(l.UnitPrice), big.NewInt(l.Qty)); want.Cmp(fen(l.Amount)) != 0 {
			t.Fatalf("line %d: amount %s is not %d × %s", l.Line, l.Amount, l.Qty, l.UnitPrice)
		}
		sum.Add(sum, fen(l.Amount))
	}
	if sum.Cmp(fen(s.Total)) != 0 {
		t.Fatalf("total %s is not the sum of the lines %s", s.Total, sum)
	}
	paid, cash := new(big.Int), new(big.Int)
	for _, pm := range s.Payments {
		if !wire.ValidMethod(pm.Method) || pm.Amount <= 0 || (pm.Method != wire.MethodCash && pm.Reference == "") {
			t.Fatalf("accepted payment %+v", pm)
		}
		paid.Add(paid, fen(pm.Amount))
		if pm.Method == wire.MethodCash {
			cash.Add(cash, fen(pm.Amount))
		}
	}
	if s.Change < 0 || fen(s.Change).Cmp(cash) > 0 {
		t.Fatalf("change %s with cash tendered %s", s.Change, cash)
	}
	if net := new(big.Int).Sub(paid, fen(s.Change)); net.Cmp(fen(s.Total)) != 0 {
		t.Fatalf("payments %s less change %s is %s, not the total %s", paid, s.Change, net, s.Total)
	}
}

// jsonEqual reports whether two JSON texts are equal once compacted.
func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
