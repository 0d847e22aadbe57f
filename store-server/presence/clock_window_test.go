package presence_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/presence"
)

// reads returns terminal's clock as the board says it now, and whether it has one.
func (f *clockFixture) reads(terminal string) (presence.Clock, bool) {
	c, ok := f.b.Clocks()[terminal]
	return c, ok
}

// TestClockHeldMessagesAfterRestart: a store-server that comes back to an external broker
// that kept its session gets first, together, the messages the broker held for it while it
// was away. A till's live sales among them read behind by as long as they were held. A till
// whose only readings are such a burst is not flagged behind: not at once, and not for good
// when it then goes quiet. A till that is behind is flagged once its readings span
// presence.DefaultBehindConfirm; one that reads ahead (which delay cannot cause) at once.
func TestClockHeldMessagesAfterRestart(t *testing.T) {
	f := newClockFixture(t)
	up := wire.UpTopic("S1", "T1")
	// The store was away ten minutes; T1, its clock right, sold every 15 s in the first five.
	// The broker hands the sales over within 25 s of the store's return.
	for i := range 20 {
		stamped := f.now.Add(-10*time.Minute + time.Duration(i)*15*time.Second)
		f.now = f.now.Add(100 * time.Millisecond)
		f.b.HandleUp(up, f.sale("T1", stamped, false))
		f.now = f.now.Add(time.Second) // one reading a second
	}
	if c, ok := f.reads("T1"); !ok || c.Off {
		t.Fatalf("after the held messages: T1's clock %+v (known %v), want known, not off", c, ok)
	}
	// T1 goes quiet (closed for the night): it is never flagged, and once the window is past
	// its clock is unknown.
	for range 10 {
		f.now = f.now.Add(30 * time.Second)
		if c, ok := f.reads("T1"); ok && c.Off {
			t.Fatalf("T1 quiet: its clock is off %+v", c)
		}
	}

	// T2's clock is 10 minutes behind: its first message is not enough, its next ones 40 s
	// later are.
	f.b.Handle(wire.BacklogTopic("S1", "T2"), f.report("T2", f.now.Add(-10*time.Minute)), false)
	if c, _ := f.reads("T2"); c.Off {
		t.Fatalf("T2 off on one message: %+v", c)
	}
	f.now = f.now.Add(40 * time.Second)
	f.b.Handle(wire.BacklogTopic("S1", "T2"), f.report("T2", f.now.Add(-10*time.Minute)), false)
	if c, ok := f.reads("T2"); !ok || !c.Off || c.Skew != -10*time.Minute {
		t.Fatalf("T2 behind over 40 s: %+v (known %v), want off, -10m", c, ok)
	}
	if n := f.logs.count("clock is off"); n != 1 {
		t.Fatalf("%d log lines for a clock going off, want 1 (T2):\n%s", n, f.logs.b.String())
	}

	// T3 reads 10 minutes ahead on its first message: off at once.
	f.b.Handle(wire.BacklogTopic("S1", "T3"), f.report("T3", f.now.Add(10*time.Minute)), false)
	if c, ok := f.reads("T3"); !ok || !c.Off || c.Skew != 10*time.Minute {
		t.Fatalf("T3 ahead: %+v (known %v), want off, 10m", c, ok)
	}

	// T4: held messages, then its prompt report 35 s later: the right figure, not off.
	for i := range 3 {
		f.b.HandleUp(wire.UpTopic("S1", "T4"), f.sale("T4", f.now.Add(-time.Duration(8-i)*time.Minute), false))
		f.now = f.now.Add(1100 * time.Millisecond)
	}
	f.now = f.now.Add(35 * time.Second)
	f.b.Handle(wire.BacklogTopic("S1", "T4"), f.report("T4", f.now.Add(-20*time.Millisecond)), false)
	if c, ok := f.reads("T4"); !ok || c.Off || c.Skew != -20*time.Millisecond {
		t.Fatalf("T4 after a prompt report: %+v (known %v), want -20ms, not off", c, ok)
	}
}

// TestClockUnknownWhenQuiet: a till heard from no more has no clock once its last reading is
// older than the window: no figure, not off, whatever it said before. It stood until the
// store-server restarted.
func TestClockUnknownWhenQuiet(t *testing.T) {
	f := newClockFixture(t)
	f.b.Handle(wire.BacklogTopic("S1", "T1"), f.report("T1", f.now.Add(3*time.Minute)), false)
	if c, ok := f.reads("T1"); !ok || !c.Off {
		t.Fatalf("T1 3 min ahead: %+v (known %v), want off", c, ok)
	}
	f.now = f.now.Add(presence.SkewWindow - time.Second)
	if c, ok := f.reads("T1"); !ok || !c.Off {
		t.Fatalf("T1 within the window: %+v (known %v), want off still", c, ok)
	}
	f.now = f.now.Add(2 * time.Second)
	if c, ok := f.reads("T1"); ok {
		t.Fatalf("T1 quiet for longer than the window: clock %+v, want unknown", c)
	}
	if n := f.logs.count("no longer known"); n != 1 {
		t.Fatalf("%d log lines for the clock no longer known, want 1:\n%s", n, f.logs.b.String())
	}
	// Heard again: known again.
	f.b.Handle(wire.BacklogTopic("S1", "T1"), f.report("T1", f.now), false)
	if c, ok := f.reads("T1"); !ok || c.Off || c.Skew != 0 {
		t.Fatalf("T1 heard again: %+v (known %v)", c, ok)
	}
}

// TestClockForgotten: the clocks of terminal ids heard once are forgotten once unknown, and
// a terminal whose status is cleared (taken out of service) is forgotten at once, as its
// presence is.
func TestClockForgotten(t *testing.T) {
	f := newClockFixture(t)
	for i := range 50 {
		id := fmt.Sprintf("T%02d", i)
		f.b.Handle(wire.BacklogTopic("S1", id), f.report(id, f.now), false)
	}
	f.b.Handle(wire.StatusTopic("S1", "T00"), nil, false)
	if c, ok := f.reads("T00"); ok {
		t.Fatalf("T00's status cleared: its clock %+v stays", c)
	}
	if n := len(f.b.Clocks()); n != 49 {
		t.Fatalf("%d clocks, want 49", n)
	}
	f.now = f.now.Add(presence.SkewWindow + time.Second)
	f.b.Handle(wire.BacklogTopic("S1", "T99"), f.report("T99", f.now), false)
	if n := len(f.b.Clocks()); n != 1 {
		t.Fatalf("%d clocks after the others went quiet, want 1", n)
	}
}

// TestClockSteppedBack: a till that sends a message every 30 s has its clock stepped back.
// The readings from before the step are higher, and the highest of the window hid the step
// for up to SkewWindow: an alert on a clock set right stood 5 minutes, and a clock reset
// behind went unflagged as long. Once the readings of the last RecentWindow span the
// confirmation time, they alone make the figure.
func TestClockSteppedBack(t *testing.T) {
	f := newClockFixture(t)
	// skew is T1's clock now; every message reads it, less 20 ms on the way. A late message
	// among them (held 3 minutes) lowers nothing.
	send := func(id string, skew time.Duration, n int) {
		for i := range n {
			f.now = f.now.Add(30 * time.Second)
			at := f.now.Add(skew - 20*time.Millisecond)
			if i == 1 {
				at = at.Add(-3 * time.Minute)
			}
			f.b.Handle(wire.BacklogTopic("S1", id), f.report(id, at), false)
		}
	}
	send("T1", 3*time.Minute, 6)
	if c, _ := f.reads("T1"); !c.Off || c.Skew != 3*time.Minute-20*time.Millisecond {
		t.Fatalf("T1 3 min ahead: %+v", c)
	}
	// NTP sets it right: within two minutes the figure is right.
	send("T1", 0, 4)
	if c, _ := f.reads("T1"); c.Off || c.Skew != -20*time.Millisecond {
		t.Fatalf("T1 set right 2 min ago: %+v, want -20ms, not off", c)
	}

	// T2, right, is reset to a day behind: flagged within two minutes.
	send("T2", 0, 6)
	send("T2", -24*time.Hour, 4)
	if c, _ := f.reads("T2"); !c.Off || c.Skew != -24*time.Hour-20*time.Millisecond {
		t.Fatalf("T2 reset a day behind 2 min ago: %+v, want off, -24h", c)
	}
}
