package main

import "testing"

// TestHeldThrough: the day the tills are told is the last of a run of days HQ holds from
// the ledger's first; a day HQ lacks stops it, whatever HQ holds after.
func TestHeldThrough(t *testing.T) {
	days := []string{"2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30"}
	for _, c := range []struct {
		held map[string]bool
		want string
	}{
		{map[string]bool{}, ""},
		{map[string]bool{"2026-11-27": true, "2026-11-28": true}, "2026-11-28"},
		{map[string]bool{"2026-11-27": true, "2026-11-29": true, "2026-11-30": true}, "2026-11-27"},
		{map[string]bool{"2026-11-28": true, "2026-11-29": true}, ""},
		{map[string]bool{"2026-11-27": true, "2026-11-28": true, "2026-11-29": true, "2026-11-30": true}, "2026-11-30"},
	} {
		if got := heldThrough(days, c.held); got != c.want {
			t.Errorf("held %v: through %q, want %q", c.held, got, c.want)
		}
	}
}
