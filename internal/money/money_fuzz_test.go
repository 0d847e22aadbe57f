package money_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
)

// plain is an independent statement of the accepted syntax.
var plain = regexp.MustCompile(`^-?[0-9]+(\.[0-9]{1,2})?$`)

func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := money.Parse(s)
		if err != nil {
			switch perr.CodeOf(err) {
			case money.CodeEmpty, money.CodeSyntax, money.CodeSubFen, money.CodeOverflow:
			default:
				t.Fatalf("Parse(%q) unexpected error %v", s, err)
			}
			if perr.KindOf(err) != perr.Invalid {
				t.Fatalf("Parse(%q) kind %q", s, perr.KindOf(err))
			}
			return
		}
		if !plain.MatchString(s) {
			t.Fatalf("Parse(%q) = %d, accepted text that is not a plain decimal", s, v)
		}
		back, err := money.Parse(v.String())
		if err != nil || back != v {
			t.Fatalf("Parse(%q) = %d; String %q re-parses to %d, %v", s, v, v.String(), back, err)
		}
	})
}

// FuzzUnmarshalJSON holds UnmarshalJSON to its definition: the JSON string's value, as
// encoding/json reads it, parsed with Parse (same amount, same error code).
func FuzzUnmarshalJSON(f *testing.F) {
	for _, s := range []string{`"12.30"`, `"-0.5"`, `"1\u0030"`, `"1\"`, `"\n1"`, `"１"`, `12.30`, `null`, `"1.234"`, `"`, `""`, `"a"b"`} {
		f.Add([]byte(s))
	}
	for _, tc := range parseCases {
		f.Add([]byte(`"` + tc.in + `"`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got money.Fen
		err := got.UnmarshalJSON(data)
		var want money.Fen
		var wantErr error
		var s string
		if len(data) == 0 || data[0] != '"' {
			wantErr = perr.New(perr.Invalid, money.CodeSyntax, "not a string")
		} else if jerr := json.Unmarshal(data, &s); jerr != nil {
			wantErr = perr.New(perr.Invalid, money.CodeSyntax, "not a JSON string")
		} else {
			want, wantErr = money.Parse(s)
		}
		if (err == nil) != (wantErr == nil) || perr.CodeOf(err) != perr.CodeOf(wantErr) || got != want && err == nil {
			t.Fatalf("UnmarshalJSON(%q) = %d, %v; want %d, %v", data, got, err, want, wantErr)
		}
	})
}
