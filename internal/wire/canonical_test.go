package wire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// slowCanonical is canonical without its fast path.
func slowCanonical(payload []byte) []byte {
	var compact bytes.Buffer
	if err := json.Compact(&compact, payload); err != nil {
		return payload
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, compact.Bytes())
	return out.Bytes()
}

var canonicalCases = []string{
	`{}`,
	`{"a":1}`,
	`{ "a":1}`,
	`{"a" :1}`,
	"{\"a\":1}\n",
	"{\"a\":\t1}",
	`{"name":"Item 01"}`,
	`{"name":"a \" b"}`,
	`{"name":"a \\" , "b": 1}`,
	`{"name":"a \\\" b"}`,
	`{"name":"<b>"}`,
	`{"name":"a & b"}`,
	`{"name":"\u003cb\u003e"}`,
	"{\"name\":\"line\u2028sep\"}",
	"{\"name\":\"para\u2029sep\"}",
	"{\"name\":\"\u2027 \u202a\"}",
	`{"lines":[{"sku":"A","qty":2},{"sku":"B","qty":1}],"total":"12.30"}`,
	`{"lines": [ {"sku":"A"} ] }`,
	`not json`,
	`{"a":"unterminated`,
	`{"a":"x\`,
	"\xe2\x80",
	`"\\"`,
}

func TestCanonicalFastPath(t *testing.T) {
	for _, c := range canonicalCases {
		if got, want := canonical([]byte(c)), slowCanonical([]byte(c)); !bytes.Equal(got, want) {
			t.Errorf("canonical(%q) = %q, want %q", c, got, want)
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := canonical(b), slowCanonical(b); !bytes.Equal(got, want) {
			t.Fatalf("canonical(%q) = %q, want %q", b, got, want)
		}
	})
}
