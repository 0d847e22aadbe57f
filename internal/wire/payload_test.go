package wire_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// maxFen is the largest amount, 92233720368547758.07 yuan.
const maxFen = "92233720368547758.07"

// obj is a decoded JSON object whose numbers stay json.Number, so that re-encoding is exact.
type obj = map[string]any

func decodeObj(tb testing.TB, s string) obj {
	tb.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var m obj
	if err := d.Decode(&m); err != nil {
		tb.Fatalf("decode %s: %v", s, err)
	}
	return m
}

// item returns the i-th object of the array field k of m.
func item(m obj, k string, i int) obj { return m[k].([]any)[i].(obj) }

// mutated returns base after f has changed it, re-encoded.
func mutated(tb testing.TB, base string, f func(m obj)) []byte {
	tb.Helper()
	m := decodeObj(tb, base)
	if f != nil {
		f(m)
	}
	return mustMarshal(tb, m)
}

func num(s string) json.Number { return json.Number(s) }

type payloadCase struct {
	name string
	f    func(m obj)
	code string
	bug  string
}

func runPayloadCases(t *testing.T, kind wire.Kind, base string, cases []payloadCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := wire.NewEnvelope(kind, testStore, testTerm, 1, testAt, mutated(t, base, tc.f))
			if err := env.Check(); err != nil {
				t.Fatalf("the envelope itself is bad: %v", err)
			}
			_, err := wire.DecodePayload(env)
			checkCode(t, err, tc.code, tc.bug)
		})
	}
}

func TestDecodePayloadValid(t *testing.T) {
	for _, k := range allKinds {
		t.Run(string(k), func(t *testing.T) {
			env := wire.NewEnvelope(k, testStore, testTerm, 1, testAt, []byte(validPayloads[k]))
			p, err := wire.DecodePayload(env)
			if err != nil {
				t.Fatalf("DecodePayload: %v", err)
			}
			var ok bool
			switch k {
			case wire.KindScan:
				var s *wire.ScanPayload
				s, ok = p.(*wire.ScanPayload)
				ok = ok && s.SKU == "A-1" && s.Qty == 2 && s.UnitPrice == 350
			case wire.KindSale:
				var s *wire.SalePayload
				s, ok = p.(*wire.SalePayload)
				ok = ok && len(s.Lines) == 2 && s.Total == 799 && s.Change == 201 && s.Lines[1].Amount == 99
			case wire.KindRefund:
				var r *wire.RefundPayload
				r, ok = p.(*wire.RefundPayload)
				ok = ok && r.Amount == 350 && r.SaleSeq == 5 && r.Restock
			case wire.KindDayClose:
				var d *wire.DayClosePayload
				d, ok = p.(*wire.DayClosePayload)
				ok = ok && d.BusinessDate == "2024-05-01" && d.SaleAmount == 12050 && len(d.Methods) == 2
			case wire.KindHeartbeat:
				var h *wire.HeartbeatPayload
				h, ok = p.(*wire.HeartbeatPayload)
				ok = ok && h.Backlog == 12 && h.CatalogVersion == 7
			}
			if !ok {
				t.Fatalf("payload = %#v", p)
			}
			// Re-encoding the decoded payload gives the same bytes.
			if b := mustMarshal(t, p); !bytes.Equal(b, []byte(validPayloads[k])) {
				t.Fatalf("re-encoded payload\n %s\nwant\n %s", b, validPayloads[k])
			}
		})
	}
}

func TestDecodePayloadEnvelopeLevel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    wire.Kind
		payload string
		code    string
	}{
		{"unknown kind", "void", `{}`, wire.CodeKind},
		{"trailing data", wire.KindHeartbeat, heartbeatJSON + ` {}`, wire.CodeSyntax},
		{"malformed", wire.KindHeartbeat, `{"backlog":`, wire.CodeSyntax},
		{"not an object", wire.KindSale, `[]`, wire.CodeType},
		{"empty", wire.KindScan, ``, wire.CodeSyntax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.DecodePayload(wire.Envelope{Kind: tc.kind, Payload: []byte(tc.payload)})
			checkCode(t, err, tc.code, "")
		})
	}
}

func TestScanPayload(t *testing.T) {
	runPayloadCases(t, wire.KindScan, scanJSON, []payloadCase{
		{name: "valid", code: ""},
		{name: "price zero", f: func(m obj) { m["unit_price"] = "0.00" }, code: ""},
		{name: "qty MaxQty", f: func(m obj) { m["qty"] = wire.MaxQty }, code: ""},
		{name: "no sale_id", f: func(m obj) { delete(m, "sale_id") }, code: wire.CodePayload},
		{name: "no sku", f: func(m obj) { m["sku"] = "" }, code: wire.CodePayload},
		{name: "sku too long", f: func(m obj) { m["sku"] = strings.Repeat("s", wire.MaxTextLen+1) }, code: wire.CodePayload},
		{name: "line 0", f: func(m obj) { m["line"] = 0 }, code: wire.CodePayload},
		{name: "qty 0", f: func(m obj) { m["qty"] = 0 }, code: wire.CodeQuantity},
		{name: "qty negative", f: func(m obj) { m["qty"] = -1 }, code: wire.CodeQuantity},
		{name: "qty over MaxQty", f: func(m obj) { m["qty"] = wire.MaxQty + 1 }, code: wire.CodeQuantity},
		{name: "negative price", f: func(m obj) { m["unit_price"] = "-0.01" }, code: wire.CodeAmount},
		{name: "price sub-fen", f: func(m obj) { m["unit_price"] = "0.001" }, code: money.CodeSubFen},
		{name: "price as number", f: func(m obj) { m["unit_price"] = num("3.50") }, code: money.CodeSyntax},
		{name: "unknown field", f: func(m obj) { m["discount"] = "1.00" }, code: wire.CodeUnknownField},
		{name: "qty as string", f: func(m obj) { m["qty"] = "2" }, code: wire.CodeType},
	})
}

func TestSalePayload(t *testing.T) { runPayloadCases(t, wire.KindSale, saleJSON, saleCases()) }

// saleCases are changes to saleJSON and the code DecodePayload gives for each; the fuzz
// target uses them as seeds too.
func saleCases() []payloadCase {
	line := func(i int, f func(l obj)) func(m obj) { return func(m obj) { f(item(m, "lines", i)) } }
	pay := func(i int, f func(p obj)) func(m obj) { return func(m obj) { f(item(m, "payments", i)) } }
	return []payloadCase{
		{name: "valid", code: ""},
		{name: "no catalog version", f: func(m obj) { delete(m, "catalog_version") }, code: ""},
		{name: "negative catalog version", f: func(m obj) { m["catalog_version"] = -1 }, code: wire.CodePayload},
		{name: "exact cash no change", f: func(m obj) {
			m["payments"] = []any{obj{"method": "cash", "amount": "7.99"}}
			m["change"] = "0.00"
		}, code: ""},
		{name: "qr with reference", f: func(m obj) {
			m["payments"] = []any{obj{"method": "qr", "amount": "7.99", "reference": "WX-1"}}
			m["change"] = "0.00"
		}, code: ""},
		{name: "free items paid in cash", f: func(m obj) {
			m["lines"] = []any{obj{"line": 1, "sku": "BAG", "qty": 1, "unit_price": "0.00", "amount": "0.00"}}
			m["total"] = "0.00"
			m["payments"] = []any{obj{"method": "cash", "amount": "1.00"}}
			m["change"] = "1.00"
		}, code: ""},
		{name: "no sale_id", f: func(m obj) { m["sale_id"] = "" }, code: wire.CodePayload},
		{name: "no lines", f: func(m obj) { m["lines"] = []any{} }, code: wire.CodePayload},
		{name: "lines missing", f: func(m obj) { delete(m, "lines") }, code: wire.CodePayload},
		{name: "too many lines", f: func(m obj) {
			var ls []any
			for i := 1; i <= wire.MaxLines+1; i++ {
				ls = append(ls, obj{"line": i, "sku": "X", "qty": 1, "unit_price": "0.00", "amount": "0.00"})
			}
			m["lines"] = ls
		}, code: wire.CodePayload},
		{name: "line 0", f: line(0, func(l obj) { l["line"] = 0 }), code: wire.CodePayload},
		{name: "line without sku", f: line(1, func(l obj) { delete(l, "sku") }), code: wire.CodePayload},
		{name: "line name too long", f: line(0, func(l obj) { l["name"] = strings.Repeat("n", wire.MaxTextLen+1) }), code: wire.CodePayload},
		{name: "qty 0", f: line(0, func(l obj) { l["qty"] = 0 }), code: wire.CodeQuantity},
		{name: "negative qty", f: line(0, func(l obj) { l["qty"] = -2; l["amount"] = "-7.00" }), code: wire.CodeQuantity},
		{name: "qty over MaxQty", f: line(0, func(l obj) { l["qty"] = wire.MaxQty + 1 }), code: wire.CodeQuantity},
		{name: "negative unit price", f: line(1, func(l obj) { l["unit_price"] = "-0.99"; l["amount"] = "-0.99" }), code: wire.CodeAmount},
		{name: "amount is not qty x price", f: line(0, func(l obj) { l["amount"] = "7.01" }), code: wire.CodeAmount},
		{name: "total is not sum of lines", f: func(m obj) { m["total"] = "8.00" }, code: wire.CodeAmount},
		{name: "payments do not add up", f: pay(1, func(p obj) { p["amount"] = "4.00" }), code: wire.CodeAmount},
		{name: "overpaid without change", f: func(m obj) { m["change"] = "2.00" }, code: wire.CodeAmount},
		{name: "no payments", f: func(m obj) { m["payments"] = []any{} }, code: wire.CodePayload},
		{name: "too many payments", f: func(m obj) {
			var ps []any
			for i := 0; i <= wire.MaxPayments; i++ {
				ps = append(ps, obj{"method": "cash", "amount": "0.01"})
			}
			m["payments"] = ps
		}, code: wire.CodePayload},
		{name: "card without reference", f: pay(0, func(p obj) { delete(p, "reference") }), code: wire.CodePayload},
		{name: "qr without reference", f: pay(0, func(p obj) { p["method"] = "qr"; p["reference"] = "" }), code: wire.CodePayload},
		{name: "reference too long", f: pay(1, func(p obj) { p["reference"] = strings.Repeat("r", wire.MaxTextLen+1) }), code: wire.CodePayload},
		{name: "change larger than cash", f: func(m obj) {
			// The sums add up (8.00 + 1.00 − 1.01 = 7.99); only the change rule is broken.
			m["payments"] = []any{obj{"method": "card", "amount": "8.00", "reference": "R"}, obj{"method": "cash", "amount": "1.00"}}
			m["change"] = "1.01"
		}, code: wire.CodeAmount},
		{name: "change with card only", f: func(m obj) {
			m["payments"] = []any{obj{"method": "card", "amount": "10.00", "reference": "R"}}
			m["change"] = "2.01"
		}, code: wire.CodeAmount},
		{name: "negative change", f: func(m obj) {
			m["payments"] = []any{obj{"method": "cash", "amount": "7.00"}}
			m["change"] = "-0.99"
		}, code: wire.CodeAmount},
		{name: "unknown method", f: pay(1, func(p obj) { p["method"] = "cheque" }), code: wire.CodeMethod},
		{name: "empty method", f: pay(1, func(p obj) { delete(p, "method") }), code: wire.CodeMethod},
		{name: "method upper case", f: pay(1, func(p obj) { p["method"] = "CASH" }), code: wire.CodeMethod},
		{name: "zero payment", f: pay(1, func(p obj) { p["amount"] = "0.00" }), code: wire.CodeAmount},
		{name: "sub-fen amount", f: line(1, func(l obj) { l["unit_price"] = "0.001" }), code: money.CodeSubFen},
		{name: "sub-fen total with zero", f: func(m obj) { m["total"] = "7.990" }, code: money.CodeSubFen},
		{name: "amount as JSON number", f: func(m obj) { m["total"] = num("7.99") }, code: money.CodeSyntax},
		{name: "line amount as JSON number", f: line(0, func(l obj) { l["amount"] = num("7") }), code: money.CodeSyntax},
		{name: "amount null", f: func(m obj) { m["change"] = nil }, code: money.CodeSyntax},
		{name: "amount exponent", f: func(m obj) { m["total"] = "7.99e0" }, code: money.CodeSyntax},
		{name: "amount empty", f: func(m obj) { m["total"] = "" }, code: money.CodeEmpty},
		{name: "amount beyond int64", f: func(m obj) { m["total"] = "92233720368547758.08" }, code: money.CodeOverflow},
		{name: "qty x price overflows", f: line(0, func(l obj) { l["unit_price"] = maxFen; l["qty"] = 2 }), code: money.CodeOverflow},
		{name: "sum of lines overflows", f: func(m obj) {
			l := obj{"line": 1, "sku": "GOLD", "qty": 1, "unit_price": maxFen, "amount": maxFen}
			m["lines"] = []any{l, l}
		}, code: money.CodeOverflow},
		{name: "sum of payments overflows", f: func(m obj) {
			m["payments"] = []any{obj{"method": "cash", "amount": maxFen}, obj{"method": "cash", "amount": maxFen}}
		}, code: money.CodeOverflow},
		{name: "total at the limit", f: func(m obj) {
			m["lines"] = []any{obj{"line": 1, "sku": "GOLD", "qty": 1, "unit_price": "1000000000.00", "amount": "1000000000.00"}}
			m["total"] = "1000000000.00"
			m["payments"] = []any{obj{"method": "card", "amount": "1000000000.00", "reference": "R"}}
			m["change"] = "0.00"
		}, code: ""},
		{name: "total above the limit", f: func(m obj) {
			m["lines"] = []any{obj{"line": 1, "sku": "GOLD", "qty": 1, "unit_price": "1000000000.01", "amount": "1000000000.01"}}
			m["total"] = "1000000000.01"
			m["payments"] = []any{obj{"method": "card", "amount": "1000000000.01", "reference": "R"}}
			m["change"] = "0.00"
		}, code: wire.CodeTooLarge},
		{name: "cash tendered above the limit", f: func(m obj) {
			m["payments"] = []any{obj{"method": "cash", "amount": "1000000000.01"}}
			m["change"] = "999999992.02"
		}, code: wire.CodeTooLarge},
		{name: "unknown field", f: func(m obj) { m["tip"] = "1.00" }, code: wire.CodeUnknownField},
		{name: "unknown field in line", f: line(0, func(l obj) { l["discount"] = "0.00" }), code: wire.CodeUnknownField},
		{name: "qty as string", f: line(0, func(l obj) { l["qty"] = "2" }), code: wire.CodeType},
		{name: "lines as object", f: func(m obj) { m["lines"] = obj{} }, code: wire.CodeType},
	}
}

func TestRefundPayload(t *testing.T) {
	runPayloadCases(t, wire.KindRefund, refundJSON, []payloadCase{
		{name: "valid", code: ""},
		{name: "cash without reference", f: func(m obj) { m["method"] = "cash"; delete(m, "reference") }, code: ""},
		{name: "no refund_id", f: func(m obj) { delete(m, "refund_id") }, code: wire.CodePayload},
		{name: "no sale_id", f: func(m obj) { m["sale_id"] = "" }, code: wire.CodePayload},
		{name: "sale_seq 0", f: func(m obj) { m["sale_seq"] = 0 }, code: wire.CodePayload},
		{name: "no lines", f: func(m obj) { m["lines"] = []any{} }, code: wire.CodePayload},
		{name: "qty 0", f: func(m obj) { item(m, "lines", 0)["qty"] = 0 }, code: wire.CodeQuantity},
		{name: "negative line amount", f: func(m obj) { item(m, "lines", 0)["amount"] = "-3.50" }, code: wire.CodeAmount},
		{name: "amount is not sum of lines", f: func(m obj) { m["amount"] = "3.49" }, code: wire.CodeAmount},
		{name: "zero amount", f: func(m obj) { item(m, "lines", 0)["amount"] = "0.00"; m["amount"] = "0.00" }, code: wire.CodeAmount},
		{name: "negative total", f: func(m obj) { item(m, "lines", 0)["amount"] = "-1.00"; m["amount"] = "-1.00" }, code: wire.CodeAmount},
		{name: "unknown method", f: func(m obj) { m["method"] = "voucher" }, code: wire.CodeMethod},
		{name: "card without reference", f: func(m obj) { delete(m, "reference") }, code: wire.CodePayload},
		{name: "amount sub-fen", f: func(m obj) { m["amount"] = "3.501" }, code: money.CodeSubFen},
		{name: "amount above the limit", f: func(m obj) {
			item(m, "lines", 0)["amount"] = "1000000000.01"
			m["lines"] = m["lines"].([]any)[:1]
			m["amount"] = "1000000000.01"
		}, code: wire.CodeTooLarge},
		{name: "restock as string", f: func(m obj) { m["restock"] = "yes" }, code: wire.CodeType},
	})
}

func TestDayClosePayload(t *testing.T) {
	meth := func(i int, f func(p obj)) func(m obj) { return func(m obj) { f(item(m, "methods", i)) } }
	runPayloadCases(t, wire.KindDayClose, dayCloseJSON, []payloadCase{
		{name: "valid", code: ""},
		{name: "no methods", f: func(m obj) { delete(m, "methods") }, code: ""},
		{name: "leap day", f: func(m obj) { m["business_date"] = "2024-02-29" }, code: ""},
		{name: "bad date", f: func(m obj) { m["business_date"] = "2024-13-01" }, code: wire.CodePayload},
		{name: "no such day", f: func(m obj) { m["business_date"] = "2023-02-29" }, code: wire.CodePayload},
		{name: "date with time", f: func(m obj) { m["business_date"] = "2024-05-01T00:00:00Z" }, code: wire.CodePayload},
		{name: "date other format", f: func(m obj) { m["business_date"] = "01/05/2024" }, code: wire.CodePayload},
		{name: "date missing", f: func(m obj) { delete(m, "business_date") }, code: wire.CodePayload},
		{name: "duplicate method", f: meth(1, func(p obj) { p["method"] = "cash" }), code: wire.CodeMethod},
		{name: "unknown method", f: meth(1, func(p obj) { p["method"] = "gold" }), code: wire.CodeMethod},
		{name: "negative sale count", f: func(m obj) { m["sale_count"] = -1 }, code: wire.CodeAmount},
		{name: "negative refund count", f: func(m obj) { m["refund_count"] = -1 }, code: wire.CodeAmount},
		{name: "negative sale amount", f: func(m obj) { m["sale_amount"] = "-0.01" }, code: wire.CodeAmount},
		{name: "negative refund amount", f: func(m obj) { m["refund_amount"] = "-3.50" }, code: wire.CodeAmount},
		{name: "negative method sale amount", f: meth(0, func(p obj) { p["sale_amount"] = "-1.00" }), code: wire.CodeAmount},
		{name: "negative method refund count", f: meth(1, func(p obj) { p["refund_count"] = -1 }), code: wire.CodeAmount},
		{name: "amount as number", f: func(m obj) { m["sale_amount"] = num("120.5") }, code: money.CodeSyntax},
	})
}

func TestHeartbeatPayload(t *testing.T) {
	runPayloadCases(t, wire.KindHeartbeat, heartbeatJSON, []payloadCase{
		{name: "valid", code: ""},
		{name: "all zero", f: func(m obj) { m["backlog"], m["oldest_age_ms"], m["catalog_version"] = 0, 0, 0 }, code: ""},
		{name: "negative backlog", f: func(m obj) { m["backlog"] = -1 }, code: wire.CodePayload},
		{name: "negative age", f: func(m obj) { m["oldest_age_ms"] = -1 }, code: wire.CodePayload},
		{name: "negative catalog version", f: func(m obj) { m["catalog_version"] = -1 }, code: wire.CodePayload},
		{name: "backlog as string", f: func(m obj) { m["backlog"] = "1" }, code: wire.CodeType},
		{name: "unknown field", f: func(m obj) { m["cpu"] = 1 }, code: wire.CodeUnknownField},
	})
}

func TestDecodeCatalog(t *testing.T) {
	t.Run("valid", func(t *testing.T) {
		c, err := wire.DecodeCatalog([]byte(catalogJSON))
		if err != nil {
			t.Fatal(err)
		}
		if c.Store != testStore || c.Version != 3 || len(c.Items) != 3 || c.Items[0].Price != 350 || c.Items[0].Barcode == "" {
			t.Fatalf("catalog = %+v", c)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if _, err := wire.DecodeCatalog([]byte(`{"v":1,"store":"s","version":1,"items":[]}`)); err != nil {
			t.Fatal(err)
		}
	})
	it := func(i int, f func(p obj)) func(m obj) { return func(m obj) { f(item(m, "items", i)) } }
	for _, tc := range []payloadCase{
		{name: "duplicate sku", f: it(2, func(p obj) { p["sku"] = "A-1" }), code: wire.CodePayload},
		{name: "duplicate barcode", f: it(2, func(p obj) { p["barcode"] = "6901234567890" }), code: wire.CodePayload},
		{name: "negative price", f: it(1, func(p obj) { p["price"] = "-0.01" }), code: wire.CodeAmount},
		{name: "price above one event", f: it(1, func(p obj) { p["price"] = "1000000000.01" }), code: wire.CodeTooLarge},
		{name: "price as number", f: it(1, func(p obj) { p["price"] = num("1") }), code: money.CodeSyntax},
		{name: "price sub-fen", f: it(1, func(p obj) { p["price"] = "1.005" }), code: money.CodeSubFen},
		{name: "no sku", f: it(1, func(p obj) { delete(p, "sku") }), code: wire.CodePayload},
		{name: "name too long", f: it(1, func(p obj) { p["name"] = strings.Repeat("n", wire.MaxTextLen+1) }), code: wire.CodePayload},
		{name: "catalog version 0", f: func(m obj) { m["version"] = 0 }, code: wire.CodePayload},
		{name: "catalog version negative", f: func(m obj) { m["version"] = -1 }, code: wire.CodePayload},
		{name: "protocol version 0", f: func(m obj) { m["v"] = 0 }, code: wire.CodeVersion},
		{name: "protocol version 2", f: func(m obj) { m["v"] = 2 }, code: wire.CodeVersion},
		{name: "bad store", f: func(m obj) { m["store"] = "a/b" }, code: wire.CodeID},
		{name: "no store", f: func(m obj) { delete(m, "store") }, code: wire.CodeID},
		{name: "unknown field", f: func(m obj) { m["etag"] = "x" }, code: wire.CodeUnknownField},
		{name: "unknown item field", f: it(0, func(p obj) { p["stock"] = 1 }), code: wire.CodeUnknownField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.DecodeCatalog(mutated(t, catalogJSON, tc.f))
			checkCode(t, err, tc.code, tc.bug)
		})
	}
	for _, tc := range []rejectCase{
		{name: "malformed", in: []byte(catalogJSON[:20]), code: wire.CodeSyntax},
		{name: "trailing data", in: []byte(catalogJSON + "x"), code: wire.CodeSyntax},
		{name: "oversize", in: bytes.Repeat([]byte(" "), wire.MaxCatalogBytes+1), code: wire.CodeOversize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.DecodeCatalog(tc.in)
			checkCode(t, err, tc.code, tc.bug)
		})
	}
}

// TestSaleOverflowBoundary: the largest int64 amount decodes where it fits exactly, and the
// sale is refused for being above MaxAmount, not as an overflow; MaxAmount itself passes.
func TestSaleOverflowBoundary(t *testing.T) {
	sale := func(amount string) error {
		p := fmt.Sprintf(`{"sale_id":"S","opened_at":"2024-05-01T00:00:00Z","lines":[{"line":1,"sku":"G","qty":1,"unit_price":%[1]q,"amount":%[1]q}],"total":%[1]q,"payments":[{"method":"cash","amount":%[1]q}],"change":"0.00"}`, amount)
		_, err := wire.DecodePayload(wire.NewEnvelope(wire.KindSale, testStore, testTerm, 1, testAt, []byte(p)))
		return err
	}
	checkCode(t, sale(maxFen), wire.CodeTooLarge, "")
	if err := sale(wire.MaxAmount.String()); err != nil {
		t.Fatal(err)
	}
}
