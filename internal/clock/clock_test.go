package clock

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseOffset(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"", 0, false},
		{"  \n", 0, false},
		{"+25m", 25 * time.Minute, false},
		{"-3h\n", -3 * time.Hour, false},
		{"-1h30m", -90 * time.Minute, false},
		{"0", 0, false},
		{"25", 0, true},
		{"soon", 0, true},
		{"+9000h", 0, true},
	} {
		got, err := ParseOffset(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseOffset(%q) = %v, %v; want %v, bad %v", c.in, got, err, c.want, c.bad)
		}
	}
	for _, d := range []time.Duration{0, 25 * time.Minute, -3 * time.Hour, -90 * time.Second} {
		if got, err := ParseOffset(FormatOffset(d)); err != nil || got != d {
			t.Errorf("FormatOffset(%v) = %q reads back as %v, %v", d, FormatOffset(d), got, err)
		}
	}
}

// TestClockSteps: the clock follows its file, stepping forward and back while it runs; an
// absent file is no offset, and a file it cannot read keeps the offset last read.
func TestClockSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock-offset")
	c := New(path, nil)
	near := func(what string, want time.Duration) {
		t.Helper()
		if got := c.Now().Sub(time.Now().Add(want)); got < -time.Second || got > time.Second {
			t.Fatalf("%s: clock is %v from system+%v", what, got, want)
		}
	}
	near("no file", 0)
	step := func(d time.Duration) {
		t.Helper()
		if err := WriteOffset(path, d); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.read = time.Time{} // as if Reread had passed
		c.mu.Unlock()
	}
	step(3 * time.Hour)
	near("stepped forward", 3*time.Hour)
	step(-25 * time.Minute)
	near("stepped back", -25*time.Minute)
	if err := os.WriteFile(path, []byte("later"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.read = time.Time{}
	near("unreadable file keeps the last offset", -25*time.Minute)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	c.read = time.Time{}
	near("file removed", 0)

	// Within Reread the offset read last stands; after it the file is read again.
	step(time.Hour)
	near("read", time.Hour)
	if err := WriteOffset(path, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	near("within Reread", time.Hour)
	c.mu.Lock()
	c.read = c.read.Add(-Reread) // as if Reread had passed since it was read
	c.mu.Unlock()
	near("after Reread", 2*time.Hour)

	var none *Clock
	if d := none.Now().Sub(time.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("a nil clock is %v from the system's", d)
	}
}
