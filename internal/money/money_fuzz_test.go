package money_test

import (
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
