package money_test

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/shopspring/decimal"
	"pgregory.net/rapid"
)

// parseCases are shared by TestParse and FuzzParse's seed corpus. code is "" for inputs
// that must parse to want.
var parseCases = []struct {
	in   string
	want money.Fen
	code string
}{
	// accepted
	{"12", 1200, ""},
	{"12.3", 1230, ""},
	{"12.30", 1230, ""},
	{"0.01", 1, ""},
	{"-5.00", -500, ""},
	{"0", 0, ""},
	{"0.00", 0, ""},
	{"-0", 0, ""},
	{"-0.00", 0, ""},
	{"007.50", 750, ""},
	{"92233720368547758.07", math.MaxInt64, ""},
	{"-92233720368547758.08", math.MinInt64, ""},

	// empty or blank
	{"", 0, money.CodeEmpty},
	{"   ", 0, money.CodeEmpty},
	{"\t\n", 0, money.CodeEmpty},

	// not a plain decimal
	{"1e3", 0, money.CodeSyntax},
	{"1E3", 0, money.CodeSyntax},
	{"1.5e2", 0, money.CodeSyntax},
	{"NaN", 0, money.CodeSyntax},
	{"nan", 0, money.CodeSyntax},
	{"Inf", 0, money.CodeSyntax},
	{"-Inf", 0, money.CodeSyntax},
	{"+5", 0, money.CodeSyntax},
	{" 5", 0, money.CodeSyntax},
	{"5 ", 0, money.CodeSyntax},
	{"1,000", 0, money.CodeSyntax},
	{"0x10", 0, money.CodeSyntax},
	{`""`, 0, money.CodeSyntax},
	{"-", 0, money.CodeSyntax},
	{"--5", 0, money.CodeSyntax},
	{".5", 0, money.CodeSyntax},
	{"5.", 0, money.CodeSyntax},
	{"-.5", 0, money.CodeSyntax},
	{"1.2.3", 0, money.CodeSyntax},
	{"1_000", 0, money.CodeSyntax},
	{"12.3a", 0, money.CodeSyntax},
	{"¥12", 0, money.CodeSyntax},
	{"１２", 0, money.CodeSyntax}, // full-width digits

	// more than 2 decimal places, even zeros
	{"0.001", 0, money.CodeSubFen},
	{"1.000", 0, money.CodeSubFen},
	{"0.000", 0, money.CodeSubFen},
	{"12.345", 0, money.CodeSubFen},
	{"-0.001", 0, money.CodeSubFen},

	// beyond the int64 fen range
	{"92233720368547758.08", 0, money.CodeOverflow},
	{"-92233720368547758.09", 0, money.CodeOverflow},
	{"99999999999999999999", 0, money.CodeOverflow},
	{"100000000000000000000.00", 0, money.CodeOverflow},
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := money.Parse(tc.in)
			if tc.code == "" {
				if err != nil {
					t.Fatalf("Parse(%q) error %v, want %d", tc.in, err, tc.want)
				}
				if got != tc.want {
					t.Fatalf("Parse(%q) = %d, want %d", tc.in, got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse(%q) = %d, want error %s", tc.in, got, tc.code)
			}
			if c := perr.CodeOf(err); c != tc.code {
				t.Fatalf("Parse(%q) code %q, want %q (err %v)", tc.in, c, tc.code, err)
			}
			if k := perr.KindOf(err); k != perr.Invalid {
				t.Fatalf("Parse(%q) kind %q, want %q", tc.in, k, perr.Invalid)
			}
			if perr.As(err).Message == "" {
				t.Fatalf("Parse(%q) error has no message", tc.in)
			}
		})
	}
}

func TestParseMessage(t *testing.T) {
	_, err := money.Parse("0.001")
	if want := `amount "0.001" has more than 2 decimal places`; perr.As(err).Message != want {
		t.Fatalf("message %q, want %q", perr.As(err).Message, want)
	}
}

func TestParseSign(t *testing.T) {
	cases := []struct {
		in          string
		nonNeg, pos string // wanted codes, "" for success
	}{
		{"0.01", "", ""},
		{"12.30", "", ""},
		{"0", "", money.CodeNotPositive},
		{"0.00", "", money.CodeNotPositive},
		{"-0.00", "", money.CodeNotPositive},
		{"-0.01", money.CodeNegative, money.CodeNotPositive},
		{"-5.00", money.CodeNegative, money.CodeNotPositive},
		{"1e3", money.CodeSyntax, money.CodeSyntax},
		{"", money.CodeEmpty, money.CodeEmpty},
		{"0.001", money.CodeSubFen, money.CodeSubFen},
	}
	for _, tc := range cases {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			want, _ := money.Parse(tc.in)
			check := func(name string, f func(string) (money.Fen, error), code string) {
				got, err := f(tc.in)
				if c := perr.CodeOf(err); c != code {
					t.Fatalf("%s(%q) code %q, want %q (err %v)", name, tc.in, c, code, err)
				}
				if err != nil && perr.KindOf(err) != perr.Invalid {
					t.Fatalf("%s(%q) kind %q", name, tc.in, perr.KindOf(err))
				}
				if err == nil && got != want {
					t.Fatalf("%s(%q) = %d, want %d", name, tc.in, got, want)
				}
			}
			check("ParseNonNegative", money.ParseNonNegative, tc.nonNeg)
			check("ParsePositive", money.ParsePositive, tc.pos)
		})
	}
}

func TestString(t *testing.T) {
	cases := []struct {
		f    money.Fen
		want string
	}{
		{1230, "12.30"},
		{5, "0.05"},
		{-5, "-0.05"},
		{0, "0.00"},
		{1, "0.01"},
		{-1, "-0.01"},
		{100, "1.00"},
		{-100, "-1.00"},
		{-1230, "-12.30"},
		{math.MaxInt64, "92233720368547758.07"},
		{math.MinInt64, "-92233720368547758.08"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.f.String(); got != tc.want {
				t.Fatalf("Fen(%d).String() = %q, want %q", int64(tc.f), got, tc.want)
			}
			if got := tc.f.Decimal(); !got.Equal(decimal.RequireFromString(tc.want)) {
				t.Fatalf("Fen(%d).Decimal() = %s, want %s", int64(tc.f), got, tc.want)
			}
		})
	}
}

type order struct {
	Total money.Fen  `json:"total"`
	Tip   *money.Fen `json:"tip,omitempty"`
}

func TestJSON(t *testing.T) {
	t.Run("marshal", func(t *testing.T) {
		b, err := json.Marshal(order{Total: 1230})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"total":"12.30"}`; string(b) != want {
			t.Fatalf("got %s, want %s", b, want)
		}
		b, _ = json.Marshal(money.Fen(math.MinInt64))
		if want := `"-92233720368547758.08"`; string(b) != want {
			t.Fatalf("got %s, want %s", b, want)
		}
	})

	cases := []struct {
		name, in string
		want     money.Fen
		code     string
	}{
		{"string", `{"total":"12.30"}`, 1230, ""},
		{"negative string", `{"total":"-0.05"}`, -5, ""},
		{"escaped string", `{"total":"\u0031"}`, 100, ""},
		{"null tip", `{"total":"1","tip":null}`, 100, ""},
		{"number", `{"total":12.30}`, 0, money.CodeSyntax},
		{"integer number", `{"total":1230}`, 0, money.CodeSyntax},
		{"null", `{"total":null}`, 0, money.CodeSyntax},
		{"bool", `{"total":true}`, 0, money.CodeSyntax},
		{"object", `{"total":{}}`, 0, money.CodeSyntax},
		{"exponent string", `{"total":"1e3"}`, 0, money.CodeSyntax},
		{"empty string", `{"total":""}`, 0, money.CodeEmpty},
		{"sub fen string", `{"total":"0.001"}`, 0, money.CodeSubFen},
		{"overflow string", `{"total":"92233720368547758.08"}`, 0, money.CodeOverflow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o order
			err := json.Unmarshal([]byte(tc.in), &o)
			if c := perr.CodeOf(err); c != tc.code {
				t.Fatalf("Unmarshal(%s) code %q, want %q (err %v)", tc.in, c, tc.code, err)
			}
			if err == nil && o.Total != tc.want {
				t.Fatalf("Unmarshal(%s) = %d, want %d", tc.in, o.Total, tc.want)
			}
		})
	}

	t.Run("direct", func(t *testing.T) {
		for _, in := range []string{``, `12`, `"12`, `null`} {
			var f money.Fen
			if err := f.UnmarshalJSON([]byte(in)); perr.CodeOf(err) != money.CodeSyntax {
				t.Fatalf("UnmarshalJSON(%q) = %v, want %s", in, err, money.CodeSyntax)
			}
		}
	})
}

func TestArithmetic(t *testing.T) {
	const maxF, minF = money.Fen(math.MaxInt64), money.Fen(math.MinInt64)
	type op func() (money.Fen, error)
	cases := []struct {
		name string
		op   op
		want money.Fen
		over bool
	}{
		{"add", func() (money.Fen, error) { return money.Add(1230, 5) }, 1235, false},
		{"add max min", func() (money.Fen, error) { return money.Add(maxF, minF) }, -1, false},
		{"add max 1", func() (money.Fen, error) { return money.Add(maxF, 1) }, 0, true},
		{"add min -1", func() (money.Fen, error) { return money.Add(minF, -1) }, 0, true},
		{"sub", func() (money.Fen, error) { return money.Sub(1230, 5) }, 1225, false},
		{"sub max max", func() (money.Fen, error) { return money.Sub(maxF, maxF) }, 0, false},
		{"sub -1 max", func() (money.Fen, error) { return money.Sub(-1, maxF) }, minF, false},
		{"sub min 1", func() (money.Fen, error) { return money.Sub(minF, 1) }, 0, true},
		{"sub 0 min", func() (money.Fen, error) { return money.Sub(0, minF) }, 0, true},
		{"sub max -1", func() (money.Fen, error) { return money.Sub(maxF, -1) }, 0, true},
		{"mul", func() (money.Fen, error) { return money.Mul(1230, 3) }, 3690, false},
		{"mul negative qty", func() (money.Fen, error) { return money.Mul(1230, -2) }, -2460, false},
		{"mul zero min", func() (money.Fen, error) { return money.Mul(0, math.MinInt64) }, 0, false},
		{"mul min 1", func() (money.Fen, error) { return money.Mul(minF, 1) }, minF, false},
		{"mul max -1", func() (money.Fen, error) { return money.Mul(maxF, -1) }, -maxF, false},
		{"mul min -1", func() (money.Fen, error) { return money.Mul(minF, -1) }, 0, true},
		{"mul -1 min", func() (money.Fen, error) { return money.Mul(-1, math.MinInt64) }, 0, true},
		{"mul max 2", func() (money.Fen, error) { return money.Mul(maxF, 2) }, 0, true},
		{"mul big big", func() (money.Fen, error) { return money.Mul(1<<32, 1<<31) }, 0, true},
		{"sum none", func() (money.Fen, error) { return money.Sum() }, 0, false},
		{"sum", func() (money.Fen, error) { return money.Sum(1, 2, 3) }, 6, false},
		{"sum back into range", func() (money.Fen, error) { return money.Sum(maxF, 1, -1) }, maxF, false},
		{"sum min max", func() (money.Fen, error) { return money.Sum(minF, maxF) }, -1, false},
		{"sum max 1", func() (money.Fen, error) { return money.Sum(maxF, 1) }, 0, true},
		{"sum min -1", func() (money.Fen, error) { return money.Sum(minF, -1) }, 0, true},
		{"sum wraps twice", func() (money.Fen, error) { return money.Sum(maxF, maxF, maxF, maxF, 4) }, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.op()
			if tc.over {
				if perr.CodeOf(err) != money.CodeOverflow || perr.KindOf(err) != perr.Invalid {
					t.Fatalf("got %d, %v; want %s", got, err, money.CodeOverflow)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// fenGen draws Fen values over the whole int64 range, often close to its ends.
var fenGen = rapid.Map(rapid.OneOf(
	rapid.Int64(),
	rapid.Int64Range(math.MaxInt64-1_000_000, math.MaxInt64),
	rapid.Int64Range(math.MinInt64, math.MinInt64+1_000_000),
), func(n int64) money.Fen { return money.Fen(n) })

// checkBig asserts that (got, err) is the exact result want, or an overflow when want
// is outside the int64 range.
func checkBig(t *rapid.T, what string, got money.Fen, err error, want *big.Int) {
	if !want.IsInt64() {
		if perr.CodeOf(err) != money.CodeOverflow {
			t.Fatalf("%s = %d, %v; want %s (exact %s)", what, got, err, money.CodeOverflow, want)
		}
		return
	}
	if err != nil || int64(got) != want.Int64() {
		t.Fatalf("%s = %d, %v; want %s", what, got, err, want)
	}
}

func TestPropStringRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := fenGen.Draw(t, "f")
		got, err := money.Parse(f.String())
		if err != nil || got != f {
			t.Fatalf("Parse(%q) = %d, %v; want %d", f.String(), got, err, f)
		}
		b, _ := json.Marshal(f)
		var back money.Fen
		if err := json.Unmarshal(b, &back); err != nil || back != f {
			t.Fatalf("JSON %s round-trips to %d, %v; want %d", b, back, err, f)
		}
	})
}

func TestPropSum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOf(fenGen).Draw(t, "xs")
		want := new(big.Int)
		for _, x := range xs {
			want.Add(want, big.NewInt(int64(x)))
		}
		got, err := money.Sum(xs...)
		checkBig(t, "Sum", got, err, want)
	})
}

func TestPropAddSubMul(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := fenGen.Draw(t, "a"), fenGen.Draw(t, "b")
		qty := rapid.OneOf(
			rapid.Int64(),
			rapid.Int64Range(-1000, 1000),
			rapid.SampledFrom([]int64{-1, 0, 1, 2, math.MinInt64, math.MaxInt64}),
		).Draw(t, "qty")
		ba, bb := big.NewInt(int64(a)), big.NewInt(int64(b))

		got, err := money.Add(a, b)
		checkBig(t, "Add", got, err, new(big.Int).Add(ba, bb))
		got, err = money.Sub(a, b)
		checkBig(t, "Sub", got, err, new(big.Int).Sub(ba, bb))
		got, err = money.Mul(a, qty)
		checkBig(t, "Mul", got, err, new(big.Int).Mul(ba, big.NewInt(qty)))
	})
}

func TestPropParseDecimalText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		neg := rapid.Bool().Draw(t, "neg")
		intPart := rapid.StringMatching(`[0-9]{1,21}`).Draw(t, "int")
		frac := rapid.StringMatching(`[0-9]{2}`).Draw(t, "frac")
		text := intPart + "." + frac
		want, _ := new(big.Int).SetString(intPart+frac, 10)
		if neg {
			text = "-" + text
			want.Neg(want)
		}
		got, err := money.Parse(text)
		checkBig(t, "Parse("+strconv.Quote(text)+")", got, err, want)
		if err == nil && !got.Decimal().Equal(decimal.RequireFromString(text)) {
			t.Fatalf("Parse(%q).Decimal() = %s", text, got.Decimal())
		}
	})
}
