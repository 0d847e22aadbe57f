// Package money is posgate's one representation of an amount of money: a Fen is a whole
// number of fen (1 yuan = 100 fen) held in an int64.
//
// Amounts enter and leave posgate as decimal text ("12.30"), are parsed strictly, and are
// added and multiplied with overflow checks. This package must never use float64 (or any
// binary floating point) for money: not to parse, not to format, not to compute.
package money

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/posgate/posgate/internal/perr"
	"github.com/shopspring/decimal"
)

// Fen is an amount of money in fen, the smallest unit of the yuan (1 yuan = 100 fen).
// The zero value is 0.00.
type Fen int64

// Stable error codes returned (with kind perr.Invalid) by this package.
const (
	CodeEmpty       = "amount_empty"        // the text is empty or blank
	CodeSyntax      = "amount_syntax"       // the text is not a plain decimal like 12.30
	CodeSubFen      = "amount_sub_fen"      // more than 2 decimal places
	CodeOverflow    = "amount_overflow"     // beyond the int64 fen range
	CodeNegative    = "amount_negative"     // negative where it must not be
	CodeNotPositive = "amount_not_positive" // zero or negative where it must be positive
)

// Parse parses decimal text such as "12", "12.3", "12.30", "0.01" or "-5.00" into a Fen.
//
// The accepted syntax is an optional leading '-', one or more digits, and optionally a '.'
// followed by one or two digits. Everything else (exponents, "+", spaces, thousands
// separators, hex, NaN, Inf) is rejected, as is a third decimal place even when it is zero.
// Errors are *perr.Error of kind perr.Invalid with one of the Code constants above.
func Parse(s string) (Fen, error) {
	if f, ok := parsePlain(s); ok {
		return f, nil
	}
	if strings.TrimSpace(s) == "" {
		return 0, perr.New(perr.Invalid, CodeEmpty, "amount is empty")
	}
	frac, ok := checkSyntax(s)
	if !ok {
		return 0, perr.New(perr.Invalid, CodeSyntax, "amount %s is not a plain decimal number like 12.30", quote(s))
	}
	if frac > 2 {
		return 0, perr.New(perr.Invalid, CodeSubFen, "amount %s has more than 2 decimal places", quote(s))
	}
	d, err := decimal.NewFromString(s)
	if err != nil { // unreachable after checkSyntax, but never trust that silently
		return 0, perr.Wrap(err, perr.Invalid, CodeSyntax, "amount %s is not a plain decimal number like 12.30", quote(s))
	}
	n := d.Shift(2).BigInt() // exact: at most 2 fractional digits
	if !n.IsInt64() {
		return 0, perr.New(perr.Invalid, CodeOverflow, "amount %s is too large", quote(s))
	}
	return Fen(n.Int64()), nil
}

// ParseNonNegative is Parse that also rejects negative amounts (Code "amount_negative").
func ParseNonNegative(s string) (Fen, error) {
	f, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if f < 0 {
		return 0, perr.New(perr.Invalid, CodeNegative, "amount %s must not be negative", quote(s))
	}
	return f, nil
}

// ParsePositive is Parse that also rejects zero and negative amounts
// (Code "amount_not_positive").
func ParsePositive(s string) (Fen, error) {
	f, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if f <= 0 {
		return 0, perr.New(perr.Invalid, CodeNotPositive, "amount %s must be greater than 0.00", quote(s))
	}
	return f, nil
}

// checkSyntax reports whether s is -?[0-9]+(\.[0-9]+)? and how many fractional digits it has.
func checkSyntax(s string) (frac int, ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	start := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == start {
		return 0, false
	}
	if i == len(s) {
		return 0, true
	}
	if s[i] != '.' {
		return 0, false
	}
	i++
	start = i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == start || i != len(s) {
		return 0, false
	}
	return len(s) - start, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// maxPlainDigits bounds the integer digits parsePlain takes: with two decimal places,
// 18 digits of fen, below the int64 range.
const maxPlainDigits = 16

// parsePlain parses -?[0-9]{1,16}(\.[0-9]{1,2})? (every amount posgate writes, and what
// tills send) into fen, and reports whether s was of that form. It is Parse's fast path:
// for such text decimal's result is the same integer, and it takes a batch's thousands of
// amounts without a big.Int each. Anything else goes through Parse's checks and decimal.
func parsePlain[T string | []byte](s T) (Fen, bool) {
	i, neg := 0, false
	if len(s) > 0 && s[0] == '-' {
		i, neg = 1, true
	}
	var n int64
	start := i
	for i < len(s) && isDigit(s[i]) {
		n = n*10 + int64(s[i]-'0')
		i++
	}
	if i == start || i-start > maxPlainDigits {
		return 0, false
	}
	frac := 0
	if i < len(s) {
		if s[i] != '.' {
			return 0, false
		}
		for i++; i < len(s) && isDigit(s[i]) && frac < 2; i++ {
			n = n*10 + int64(s[i]-'0')
			frac++
		}
		if frac == 0 || i != len(s) {
			return 0, false
		}
	}
	for ; frac < 2; frac++ {
		n *= 10
	}
	if neg {
		n = -n
	}
	return Fen(n), true
}

// quote quotes s for an error message, cutting very long input short.
func quote(s string) string {
	const limit = 40
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "…"
	}
	return strconv.Quote(s)
}

// String formats f as yuan with exactly two decimal places: 1230 → "12.30", -5 → "-0.05".
func (f Fen) String() string {
	return string(f.appendText(nil))
}

func (f Fen) appendText(b []byte) []byte {
	u := uint64(f)
	if f < 0 {
		b = append(b, '-')
		u = -u // correct for math.MinInt64 too
	}
	b = strconv.AppendUint(b, u/100, 10)
	c := u % 100
	return append(b, '.', byte('0'+c/10), byte('0'+c%10))
}

// Decimal returns f in yuan as an exact decimal.Decimal (1230 → 12.30).
func (f Fen) Decimal() decimal.Decimal {
	return decimal.New(int64(f), -2)
}

// MarshalJSON writes f as a JSON string such as "12.30": money on the wire is text.
func (f Fen) MarshalJSON() ([]byte, error) {
	b := append(make([]byte, 0, 24), '"')
	b = f.appendText(b)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts only a JSON string and parses it with Parse. A JSON number, null
// or any other JSON value is rejected with Code "amount_syntax"; use *Fen for an optional
// amount (encoding/json sets a nil pointer for null without calling this method).
func (f *Fen) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || data[0] != '"' {
		return perr.New(perr.Invalid, CodeSyntax, "amount %s must be a JSON string like \"12.30\"", quote(string(data)))
	}
	if len(data) >= 2 && data[len(data)-1] == '"' {
		if v, ok := parsePlain(data[1 : len(data)-1]); ok {
			*f = v
			return nil
		}
	}
	s, ok := plainString(data)
	if !ok {
		if err := json.Unmarshal(data, &s); err != nil {
			return perr.Wrap(err, perr.Invalid, CodeSyntax, "amount %s is not a valid JSON string", quote(string(data)))
		}
	}
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// plainString returns the text of a JSON string that has no escapes and no control
// characters ("12.30" as every amount is written): its bytes between the quotes. Anything
// else is left to encoding/json.
func plainString(data []byte) (string, bool) {
	if len(data) < 2 || data[len(data)-1] != '"' {
		return "", false
	}
	body := data[1 : len(data)-1]
	for _, c := range body {
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return "", false
		}
	}
	return string(body), true
}

// Add returns a+b, or an error with Code "amount_overflow" if it does not fit in a Fen.
func Add(a, b Fen) (Fen, error) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, overflow("%s + %s", a, b)
	}
	return s, nil
}

// Sub returns a-b, or an error with Code "amount_overflow" if it does not fit in a Fen.
func Sub(a, b Fen) (Fen, error) {
	d := a - b
	if (b > 0 && d > a) || (b < 0 && d < a) {
		return 0, overflow("%s - %s", a, b)
	}
	return d, nil
}

// Mul returns f*qty, or an error with Code "amount_overflow" if it does not fit in a Fen.
func Mul(f Fen, qty int64) (Fen, error) {
	if f == 0 || qty == 0 {
		return 0, nil
	}
	p := int64(f) * qty
	if p/qty != int64(f) || (qty == -1 && f == minFen) || (f == -1 && qty == minFen) {
		return 0, overflow("%s × %d", f, qty)
	}
	return Fen(p), nil
}

// Sum returns the sum of xs (0.00 for none), or an error with Code "amount_overflow" if
// the exact total does not fit in a Fen. Intermediate sums may leave the range as long as
// the total comes back into it.
func Sum(xs ...Fen) (Fen, error) {
	var acc Fen
	wraps := 0 // the exact total is acc + wraps·2⁶⁴
	for _, x := range xs {
		s := acc + x
		if x > 0 && s < acc {
			wraps++
		} else if x < 0 && s > acc {
			wraps--
		}
		acc = s
	}
	if wraps != 0 {
		return 0, perr.New(perr.Invalid, CodeOverflow, "total of %d amounts is out of range", len(xs))
	}
	return acc, nil
}

const minFen = -1 << 63

func overflow(format string, args ...any) error {
	return perr.New(perr.Invalid, CodeOverflow, "amount "+format+" is out of range", args...)
}
