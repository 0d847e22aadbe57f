package broker

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/refusals"
	"github.com/posgate/posgate/internal/wire"
)

// TestRefusalsAreBooked: with a book, each refused login, publish and subscription is
// counted under its code.
func TestRefusalsAreBooked(t *testing.T) {
	book := refusals.New(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Minute, refusals.StoreMetric)
	b, err := Start(Config{Addr: "127.0.0.1:0", Store: "S1", Users: []User{mustUser(t, "t1", "p1-of-the-tests!", "T1")},
		OnUp: func(string, []byte) {}, Refusals: book})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := connect(t, b, "T1", "t1", "wrong"); err == nil {
		t.Fatal("a wrong password was let in")
	}
	if _, err := connect(t, b, "T9", "t9", "p9"); err == nil {
		t.Fatal("an unknown user was let in")
	}
	c, err := connect(t, b, "T1", "t1", "p1-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}
	c.Subscribe(wire.DownTopic("S1", "T2"), 1, nil).WaitTimeout(5 * time.Second)
	c.Publish(wire.UpTopic("S1", "T2"), 1, false, "forged").WaitTimeout(time.Second)
	for _, code := range []string{CodePasswordWrong, CodeUserUnknown, CodeSubscribeDenied, CodePublishDenied} {
		wait(t, code+" booked", func() bool { return book.Counts()[code] >= 1 })
	}
	if n := book.Counts()[CodePasswordWrong]; n > 2 {
		t.Errorf("one wrong password booked %d times", n)
	}
}
