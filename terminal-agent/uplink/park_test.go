package uplink

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestParkReachesARequestThatJoinedDuringTheWrite: a drain's acks (no request waiting, no
// live verdict) are written without the lane's lock. A retry of a request committed before
// a restart and never answered starts waiting on its event while those acks are written,
// and the store has rejected (or answered conflict on) that event: the agent parks it. The
// retry must learn so at once (its answer says "parked": true, and is recorded for its
// key); it waited out the verdict deadline instead, and was answered as if the event were
// still on its way.
func TestParkReachesARequestThatJoinedDuringTheWrite(t *testing.T) {
	ctx := context.Background()
	st, path := milkOutbox(t)
	for _, status := range []wire.AckStatus{wire.AckRejected, wire.AckConflict} {
		// An offline scan, committed by a run of the agent that stopped before answering.
		id, _, _, err := st.Do(ctx, "", "", outbox.Mode{}, func(tx *outbox.Tx) (string, error) { return tx.OpenSale() })
		if err != nil {
			t.Fatal(err)
		}
		_, seq, _, err := st.Do(ctx, "", "", outbox.Mode{Disconnected: true}, func(tx *outbox.Tx) (string, error) {
			_, err := tx.AddLine(id, "MILK", "", 1)
			return id, err
		})
		if err != nil {
			t.Fatal(err)
		}
		// Another connection holds the write lock, so that the acks' write waits while
		// the retry starts waiting.
		other, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		c, err := other.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		u := New(Config{Store: "S1", Terminal: "T1", VerdictTimeout: 2 * time.Second}, st)
		acked := make(chan struct{})
		go func() {
			defer close(acked)
			u.onDown(ctx, fmt.Appendf(nil, `{"v":1,"kind":"acks","store":"S1","terminal":"T1",`+
				`"acks":[{"seq":%d,"key":%q,"status":%q,"code":"sale_invalid","message":"cannot record"}]}`,
				seq, wire.Key("T1", seq), status))
		}()
		time.Sleep(100 * time.Millisecond) // the acks' write waits for the lock
		got := make(chan Verdict, 1)
		start := time.Now()
		go func() { got <- u.Await(ctx, seq) }()
		time.Sleep(100 * time.Millisecond) // the retry waits on the event
		if _, err := c.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		c.Close()
		<-acked
		v := <-got
		took := time.Since(start)
		if v.Ack == nil || !v.Parked || took > time.Second {
			t.Errorf("%s: the retry got %+v after %v, want the event parked at once", status, v, took.Round(time.Millisecond))
		}
	}
}
