package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"
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

// fmtHash is Hash as its definition states it: fmt's text, then the canonical payload.
func fmtHash(kind Kind, store, terminal string, seq int64, at time.Time, payload []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "posgate/v%d\n%s\n%s\n%s\n%d\n%s\n", Version, kind, store, terminal, seq,
		at.UTC().Format(time.RFC3339Nano))
	h.Write(slowCanonical(payload))
	return hex.EncodeToString(h.Sum(nil))
}

// FuzzHash holds Hash to its definition, for payloads short and long (past its buffer).
func FuzzHash(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add("sale", "S001", "T01", int64(7), int64(1_700_000_000_123_456_789), []byte(c))
	}
	f.Add("refund", "S-a_b", "T", int64(-1), int64(0), bytes.Repeat([]byte(`{"a":"<x>"}`), 200))
	f.Fuzz(func(t *testing.T, kind, store, terminal string, seq, ns int64, payload []byte) {
		at := time.Unix(0, ns).In(time.FixedZone("x", 8*3600))
		if got, want := Hash(Kind(kind), store, terminal, seq, at, payload), fmtHash(Kind(kind), store, terminal, seq, at, payload); got != want {
			t.Fatalf("Hash = %s, want %s", got, want)
		}
	})
}
