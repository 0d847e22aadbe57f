package hqwire_test

import (
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/hqwire"
)

// TestEscapeSKU: an exception's SKU holds no NUL, fits MaxExceptionSKU whatever the wire's
// SKU, no two SKUs share an escape, and UnescapeSKU reads each back and refuses a text
// EscapeSKU cannot have written.
func TestEscapeSKU(t *testing.T) {
	skus := []string{"A", "A\x00B", "A\x1aB", "A\x1a0B", "A\x1a\x00B", "A\x00\x1aB", "\x00", "\x1a", "\x1a0", "\x1a\x1a",
		strings.Repeat("\x00", 128), strings.Repeat("\x1a", 128)}
	seen := map[string]string{}
	for _, sku := range skus {
		e := hqwire.EscapeSKU(sku)
		switch {
		case strings.ContainsRune(e, 0):
			t.Errorf("EscapeSKU(%q) = %q holds a NUL", sku, e)
		case len(e) > hqwire.MaxExceptionSKU:
			t.Errorf("EscapeSKU(%q) is %d bytes", sku, len(e))
		}
		if other, ok := seen[e]; ok {
			t.Errorf("EscapeSKU(%q) = EscapeSKU(%q) = %q", sku, other, e)
		}
		if back, ok := hqwire.UnescapeSKU(e); !ok || back != sku {
			t.Errorf("UnescapeSKU(EscapeSKU(%q)) = %q, %v", sku, back, ok)
		}
		seen[e] = sku
	}
	if got := hqwire.EscapeSKU("MILK-1L"); got != "MILK-1L" {
		t.Errorf("EscapeSKU changed a plain SKU: %q", got)
	}
	for _, bad := range []string{"\x1a", "A\x1a", "A\x1aB", "\x1a\x1a\x1a"} {
		if got, ok := hqwire.UnescapeSKU(bad); ok {
			t.Errorf("UnescapeSKU(%q) = %q: not an escape EscapeSKU writes", bad, got)
		}
	}
}
