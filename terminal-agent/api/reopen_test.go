package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"net/http"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestReopenAMistakenClose: the cashier presses "day close" at 15:00 by mistake; the till
// refuses the next customer (day_closed). A supervisor reopens the day with a reason, the
// till sells again, and the evening's close (naming no day) declares every sale of the day
// as a new close event with a higher seq; GET /v1/day-totals shows the reopen. A retry of
// the reopen gets its first answer, and a retry of the mistaken close gets the mistaken
// close's answer and does not close the day again. Without the reopen the close was final
// and the till was locked out of the rest of the day's trade.
func TestReopenAMistakenClose(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	ctx := context.Background()
	a.sellMilk()               // 10:00
	a.clock.Add(5 * time.Hour) // 15:00: "close day" pressed by mistake
	var first client.DayCloseAnswer
	a.must("POST", "/v1/day-close", `{}`, 200, "Idempotency-Key", "close-1").json(t, &first)
	if first.Totals.SaleCount != 1 || first.Event == nil {
		t.Fatalf("the mistaken close: %+v, event %+v; want one sale and its event", first.Totals, first.Event)
	}
	if r := a.do("POST", "/v1/sales", ""); r.Status != http.StatusConflict || r.code(t) != outbox.CodeDayClosed {
		t.Fatalf("a sale after the close: %d %s, want 409 %s", r.Status, r.Body, outbox.CodeDayClosed)
	}

	a.clock.Add(5 * time.Minute)
	reopen := `{"business_date":"2026-11-29","reason":"closed by mistake at 15:00","supervisor":{"name":"Wang","pin":"482913"}}`
	r1 := a.must("POST", "/v1/day-close/reopen", reopen, 200, "Idempotency-Key", "reopen-1")
	var ro client.DayReopenAnswer
	r1.json(t, &ro)
	if ro.Reopen.BusinessDate != "2026-11-29" || ro.Reopen.CloseSeq != first.Event.Seq ||
		ro.Reopen.ClosedTotals.SaleCount != 1 || ro.Reopen.Reason != "closed by mistake at 15:00" ||
		ro.Reopen.Supervisor != "Wang" || !ro.Reopen.ReopenedAt.Equal(a.clock.Now()) {
		t.Fatalf("the reopen answered %s; want the close of event %d with one sale, the reason, Wang and %s",
			r1.Body, first.Event.Seq, a.clock.Now())
	}
	if r2 := a.must("POST", "/v1/day-close/reopen", reopen, 200, "Idempotency-Key", "reopen-1"); !bytes.Equal(r2.Body, r1.Body) {
		t.Errorf("a retry of the reopen: %s\nwant the first answer %s", r2.Body, r1.Body)
	}
	totals := a.dayTotals("2026-11-29")
	if totals.ClosedSeq != 0 || len(totals.Reopens) != 1 || totals.Reopens[0].Reason != ro.Reopen.Reason {
		t.Fatalf("day totals after the reopen: closed_seq %d, reopens %+v; want open with the one reopen",
			totals.ClosedSeq, totals.Reopens)
	}

	a.clock.Add(time.Hour) // 16:05: trade goes on
	a.sellMilk()
	id := a.openSale()
	a.addLine(id, "BREAD", 2) // 17.98
	a.pay(id, client.PayRequest{Method: "card", Amount: "17.98", Reference: "AUTH-1"})
	// The mistaken close's request, retried, is answered as it was and closes nothing.
	if r := a.must("POST", "/v1/day-close", `{}`, 200, "Idempotency-Key", "close-1"); !bytes.Equal(r.Body, a.answerOf(t, "close-1")) {
		t.Errorf("a retry of the first close: %s", r.Body)
	}
	if r := a.do("POST", "/v1/sales", ""); r.Status != http.StatusCreated {
		t.Fatalf("a sale after a retry of the first close: %d %s", r.Status, r.Body)
	}

	a.clock.Add(6 * time.Hour) // 22:05: the evening's close, naming no day
	second := a.dayClose("")
	want := money.Fen(1250 + 1250 + 1798)
	if second.Totals.BusinessDate != "2026-11-29" || second.Totals.SaleCount != 3 || second.Totals.SaleAmount != want {
		t.Fatalf("the evening's close: %+v; want 2026-11-29, 3 sales, %s", second.Totals, want)
	}
	if second.Event == nil || second.Event.Seq <= first.Event.Seq {
		t.Fatalf("the evening's close is event %+v; want a new event after the first close's %d", second.Event, first.Event.Seq)
	}
	queued, err := a.store.DayClosed(ctx, second.Event.Seq)
	if err != nil || queued.SaleCount != 3 || queued.SaleAmount != want {
		t.Errorf("the new close event carries %+v (%v), want 3 sales, %s", queued, err, want)
	}
	if old, err := a.store.DayClosed(ctx, first.Event.Seq); err != nil || old.SaleCount != 1 {
		t.Errorf("the first close event now carries %+v (%v); it was sent and stays as it was", old, err)
	}
	totals = a.dayTotals("2026-11-29")
	if totals.ClosedSeq != second.Event.Seq || len(totals.Reopens) != 1 || totals.Reopens[0].CloseSeq != first.Event.Seq {
		t.Errorf("day totals after the second close: closed_seq %d, reopens %+v; want %d and the reopen of %d",
			totals.ClosedSeq, totals.Reopens, second.Event.Seq, first.Event.Seq)
	}
	if r := a.do("POST", "/v1/sales", ""); r.Status != http.StatusConflict || r.code(t) != outbox.CodeDayClosed {
		t.Errorf("a sale after the second close: %d %s, want 409 %s", r.Status, r.Body, outbox.CodeDayClosed)
	}
}

// dayReopen reopens date, closed, for reason.
func (a *agent) dayReopen(date, reason string) client.DayReopenAnswer {
	a.t.Helper()
	ro, err := a.c.DayReopen(context.Background(), client.NewKey(), client.DayReopenRequest{BusinessDate: date, Reason: reason,
		Supervisor: &wang})
	a.ok("reopen "+date, err)
	return ro
}

// answerOf returns the answer recorded for a client token.
func (a *agent) answerOf(t *testing.T, token string) []byte {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+a.path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var body []byte
	if err := db.QueryRow(`SELECT body FROM requests WHERE token = ?`, token).Scan(&body); err != nil {
		t.Fatal(err)
	}
	return append(body, '\n')
}

// TestReopenRefusals: a reopen names a closed day, not in the future and within the close
// lookback, and says why; anything else is refused with its code and changes nothing.
func TestReopenRefusals(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{}) // 2026-11-29 10:00, lookback 7 days
	a.sellMilk()
	for _, d := range []string{"2026-11-21", "2026-11-22"} { // 8 and 7 days back
		a.dayClose(d)
	}
	before := a.dump()
	for _, c := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"not closed", `{"business_date":"2026-11-29","reason":"x","supervisor":{"name":"Wang","pin":"482913"}}`, 409, outbox.CodeDayNotClosed},
		{"never traded", `{"business_date":"2026-11-25","reason":"x","supervisor":{"name":"Wang","pin":"482913"}}`, 409, outbox.CodeDayNotClosed},
		{"no reason", `{"business_date":"2026-11-22","supervisor":{"name":"Wang","pin":"482913"}}`, 400, outbox.CodeReopenReasonRequired},
		{"a blank reason", `{"business_date":"2026-11-22","reason":"  ","supervisor":{"name":"Wang","pin":"482913"}}`, 400, outbox.CodeReopenReasonRequired},
		{"before the lookback", `{"business_date":"2026-11-21","reason":"x","supervisor":{"name":"Wang","pin":"482913"}}`, 409, outbox.CodeReopenTooOld},
		{"future", `{"business_date":"2026-11-30","reason":"x","supervisor":{"name":"Wang","pin":"482913"}}`, 409, outbox.CodeDayNotStarted},
		{"no day", `{"reason":"x","supervisor":{"name":"Wang","pin":"482913"}}`, 400, "business_date_required"},
		{"a bad day", `{"business_date":"29.11.2026","reason":"x","supervisor":{"name":"Wang","pin":"482913"}}`, 400, "business_date_invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", "/v1/day-close/reopen", c.body, "Idempotency-Key", "k-"+c.name)
			if r.Status != c.status || r.code(t) != c.code {
				t.Fatalf("%s: %d %s, want %d %s", c.body, r.Status, r.Body, c.status, c.code)
			}
		})
	}
	if after := a.dump(); after != before {
		t.Errorf("a refused reopen changed the outbox:\nbefore %s\nafter %s", before, after)
	}
	totals := a.dayTotals("2026-11-21")
	if totals.ClosedSeq == 0 || len(totals.Reopens) != 0 {
		t.Errorf("2026-11-21 after a refused reopen: closed_seq %d, reopens %+v; want closed, none", totals.ClosedSeq, totals.Reopens)
	}
	// The lookback's first day is reopened, and is then open: reopening it again is refused.
	a.dayReopen("2026-11-22", "closed the wrong day")
	if r := a.do("POST", "/v1/day-close/reopen", `{"business_date":"2026-11-22","reason":"again","supervisor":{"name":"Wang","pin":"482913"}}`); r.Status != 409 || r.code(t) != outbox.CodeDayNotClosed {
		t.Errorf("a second reopen of an open day: %d %s, want 409 %s", r.Status, r.Body, outbox.CodeDayNotClosed)
	}
}
