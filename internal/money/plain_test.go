package money

import (
	"testing"

	"github.com/shopspring/decimal"
)

// FuzzParsePlain holds Parse's fast path to decimal: text it takes is text decimal reads
// as the same number of fen, and it takes every plain amount of up to 16 integer digits.
func FuzzParsePlain(f *testing.F) {
	for _, s := range []string{"0", "-0", "12.30", "12.3", "007.10", "-5.00", "9999999999999999.99", "99999999999999999",
		"1.", ".5", "1.234", "--1", "+1", "1e2", " 1", "-0.01", "1234567890123456"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parsePlain(s)
		gotB, okB := parsePlain([]byte(s))
		if ok != okB || got != gotB {
			t.Fatalf("parsePlain(%q): %d %v as a string, %d %v as bytes", s, got, ok, gotB, okB)
		}
		frac, syntax := checkSyntax(s)
		intDigits := len(s)
		if syntax && frac > 0 {
			intDigits -= frac + 1
		}
		if syntax && len(s) > 0 && s[0] == '-' {
			intDigits--
		}
		if want := syntax && frac <= 2 && intDigits <= maxPlainDigits; ok != want {
			t.Fatalf("parsePlain(%q) took it: %v, want %v", s, ok, want)
		}
		if !ok {
			return
		}
		d, err := decimal.NewFromString(s)
		if err != nil {
			t.Fatalf("parsePlain(%q) = %d, decimal refuses it: %v", s, got, err)
		}
		if n := d.Shift(2).BigInt(); !n.IsInt64() || n.Int64() != int64(got) {
			t.Fatalf("parsePlain(%q) = %d, decimal reads %s fen", s, got, n)
		}
	})
}
