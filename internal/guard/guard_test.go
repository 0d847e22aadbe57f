package guard

import (
	"strconv"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestWaitsDoubleAfterTheFreeFailures(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	g := New(Config{Free: 3, Base: time.Second, Max: 10 * time.Second, Forgive: time.Hour, Now: c.now})
	var got []time.Duration
	for range 9 {
		got = append(got, g.Fail("t01"))
	}
	want := []time.Duration{0, 0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	if w := g.Wait("t01"); w != 10*time.Second {
		t.Errorf("Wait right after: %v, want 10s", w)
	}
	if w := g.Wait("t02"); w != 0 {
		t.Errorf("another key waits %v, want 0", w)
	}
	c.t = c.t.Add(10 * time.Second)
	if w := g.Wait("t01"); w != 0 {
		t.Errorf("after the wait: %v, want 0", w)
	}
	g.Succeed("t01")
	if w := g.Fail("t01"); w != 0 {
		t.Errorf("a failure after a success waits %v, want 0 (counting starts over)", w)
	}
}

func TestQuietKeysAreForgiven(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	g := New(Config{Free: 1, Forgive: time.Minute, Now: c.now})
	g.Fail("ip")
	if g.Fail("ip") == 0 {
		t.Fatal("no wait after the free failure")
	}
	c.t = c.t.Add(time.Minute)
	if w := g.Wait("ip"); w != 0 || g.Len() != 0 {
		t.Errorf("after a quiet minute: wait %v, %d keys held", w, g.Len())
	}
	if w := g.Fail("ip"); w != 0 {
		t.Errorf("the first failure after being forgiven waits %v", w)
	}
}

// TestKeysAreBounded: a flood of one-off keys (addresses) does not grow the guard past
// Keys, and a key failing throughout keeps its count.
func TestKeysAreBounded(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	g := New(Config{Free: 2, Keys: 100, Forgive: time.Hour, Now: c.now})
	for i := range 10_000 {
		g.Fail("flood-" + strconv.Itoa(i))
		if i%50 == 0 {
			g.Fail("steady")
		}
	}
	if g.Len() > 100 {
		t.Fatalf("%d keys held, want at most 100", g.Len())
	}
	if g.Wait("steady") == 0 {
		t.Error("the key failing throughout was forgotten")
	}
	if len(g.order) > 4*100+1 {
		t.Errorf("order grew to %d", len(g.order))
	}
}
