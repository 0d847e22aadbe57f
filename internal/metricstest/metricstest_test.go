package metricstest

import "testing"

func TestValue(t *testing.T) {
	fams, err := Parse([]byte(`# TYPE a_total counter
a_total 3
# TYPE g gauge
g{k="x"} 1
g{k="y",j="z"} 2
# TYPE h histogram
h_bucket{le="+Inf"} 5
h_sum 1.5
h_count 5
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
		ok     bool
	}{
		{"a_total", nil, 3, true},
		{"g", map[string]string{"k": "x"}, 1, true},
		{"g", map[string]string{"k": "y", "j": "z"}, 2, true},
		{"g", map[string]string{"k": "y"}, 0, false}, // labels match exactly, not in part
		{"h", nil, 5, true},
		{"missing", nil, 0, false},
	} {
		if got, ok := Value(fams, c.name, c.labels); got != c.want || ok != c.ok {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", c.name, c.labels, got, ok, c.want, c.ok)
		}
	}
	if _, err := Parse([]byte("not metrics {")); err == nil {
		t.Error("Parse took malformed text")
	}
}
