package wire

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/posgate/posgate/internal/perr"
)

var strictSeeds = []string{
	`{"v":1,"kind":"sale","store":"S1","terminal":"T1","seq":1,"key":"T1:1","hash":"h","at":"2026-11-29T10:00:00Z","payload":{"a":1}}`,
	`{"v":1,"KIND":"sale"}`, `{"v":1,"v":2}`, `{"v":1.0}`, `{"v":1e2}`, `{"v":-0}`, `{"v":01}`, `{"v":99999999999999999999}`,
	`{"v":"1"}`, `{"v":null}`, `{"seq":-1}`, `{"at":"2026-11-29"}`, `{"at":"2026-11-29T10:00:00+08:00"}`, `{"x":1}`,
	`{"store":"\u00e9\ud800"}`, "{\"store\":\"\xff\"}", `{"payload":[1]}`, `{"payload":{"a":}}`, `{} {}`, `{}x`, ` {} `, ``,
	`[]`, `null`, `{"offline":1}`, `{"offline":"true"}`,
	`{"sale_id":"s","opened_at":"2026-11-29T10:00:00Z","lines":[{"line":1,"sku":"A","qty":2,"unit_price":"1.50","amount":"3.00"}],"total":"3.00","payments":[{"method":"cash","amount":"5"}],"change":"2.00"}`,
	`{"total":"1.001"}`, `{"total":1.5}`, `{"total":"-0.01"}`, `{"total":"1e3"}`, `{"lines":[{"qty":1.5}]}`, `{"lines":{}}`,
	// Invalid documents, inside the raw payload too: refused both ways with the same code.
	`{"v":1,}`, `{'v':1}`, `{v:1}`, `{"v":NaN}`, `{"v":tru}`, `{"store":"\x41"}`, "{\"store\":\"a\tb\"}",
	`{"payload":{"a":[1,]}}`, `{"payload":{"a":1,}}`, `{"payload":{"a":.5}}`, `{"payload":{"a":1.}}`,
	`{"payload":{"a":+1}}`, `{"payload":{"a":"\u12"}}`, `{"payload":[1 2]}`, `{"payload":{"a":1 "b":2}}`,
	`{"payload":nul}`, `{"payload":{"a":1e+}}`,
}

// checkSameStrict decodes b into a new *T both ways and fails unless both refuse it with
// the same code or both accept it with the same value.
func checkSameStrict[T any](t *testing.T, b []byte) {
	var got, want T
	gerr, werr := decodeStrict(b, &got), stdStrict(b, &want)
	if (gerr == nil) != (werr == nil) || perr.CodeOf(gerr) != perr.CodeOf(werr) {
		t.Fatalf("%T from %q: error %v, encoding/json says %v", got, b, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%T from %q: %+v, encoding/json says %+v", got, b, got, want)
	}
}

func TestStrictDecodingMatchesEncodingJSON(t *testing.T) {
	for _, s := range strictSeeds {
		t.Run(fmt.Sprintf("%.30s", s), func(t *testing.T) {
			checkSameStrict[Envelope](t, []byte(s))
			checkSameStrict[SalePayload](t, []byte(s))
			checkSameStrict[Batch](t, []byte(s))
		})
	}
}

func FuzzStrictDecoding(f *testing.F) {
	for _, s := range strictSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSameStrict[Envelope](t, b)
		checkSameStrict[SalePayload](t, b)
		checkSameStrict[RefundPayload](t, b)
		checkSameStrict[DayClosePayload](t, b)
	})
}
