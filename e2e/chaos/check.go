package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"sync"
	"time"

	_ "github.com/mattn/go-sqlite3" // the ledger, read-only

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/store-server/client"
)

// Load is the cashiers' work: mixed baskets and tenders and a refund now and then, on every
// till at once, until Stop. Pause holds every cashier between two sales, for a check.
type Load struct {
	cashiers map[string]*e2e.Cashier
	gate     sync.RWMutex
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// StartLoad starts the cashiers.
func StartLoad(cashiers map[string]*e2e.Cashier) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cashiers: cashiers, stop: cancel}
	baskets := [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"TEA", "MILK"}, {"EGGS"}, {"TEA"}, {"BREAD"}}
	methods := []string{"cash", "card", "qr"}
	n := 0
	for _, c := range cashiers {
		n++
		first := n // each cashier starts at its own basket
		l.wg.Go(func() {
			for i := first; ctx.Err() == nil; i++ {
				l.gate.RLock()
				c.Sale(baskets[i%len(baskets)], methods[i%len(methods)])
				if i%9 == 0 {
					c.RefundOne(i)
				}
				l.gate.RUnlock()
				sleep(ctx, 20*time.Millisecond)
			}
		})
	}
	return l
}

// Pause waits for every cashier to finish its sale and holds them; Resume lets them go on.
func (l *Load) Pause()  { l.gate.Lock() }
func (l *Load) Resume() { l.gate.Unlock() }

// Stop ends the load.
func (l *Load) Stop() {
	l.stop()
	l.wg.Wait()
}

// Quiet is how long the store is left quiet before a check: the bound within which it
// finds a key Redis dropped without a gate call and rebuilds.
const Quiet = 2 * time.Second

// Check waits for the store to settle (its gate back on Redis, every till drained) and
// checks the invariants: e2e.Verify (per terminal and day the till's totals = the ledger's =
// Redis's; stock ledger = proven = Redis; refunds held to their sales), every event a till
// answered 2xx in the ledger, accepted, once; no live oversell; flow numbers distinct per
// date. The report's lines say what held.
func Check(ctx context.Context, s *e2e.StoreServer, cashiers map[string]*e2e.Cashier, dates []string) e2e.Report {
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// Redis equals the ledger whenever the store is quiet: a key dropped just before the
	// load paused is found by the store's marker check within its probe (a second) and
	// rebuilt; the check gives it Quiet.
	sleep(ctx, Quiet)
	waitRedis(wctx, s)
	rep := e2e.Verify(wctx, s, cashiers, dates)
	ledgerChecks(ctx, s, cashiers, &rep)
	return rep
}

// waitRedis waits until the store's gate is on Redis (Verify says so if it never is).
func waitRedis(ctx context.Context, s *e2e.StoreServer) {
	for ctx.Err() == nil {
		if m, err := s.Manager().Mode(ctx); err == nil && m.Mode == client.ModeRedis {
			return
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// ledgerChecks reads the ledger (read-only, beside the running store) for invariants 1, 5
// and 8.
func ledgerChecks(ctx context.Context, s *e2e.StoreServer, cashiers map[string]*e2e.Cashier, rep *e2e.Report) {
	db, err := sql.Open("sqlite3", sqlitedb.URI(filepath.Join(s.Opts.DataDir, "ledger.db"),
		url.Values{"mode": {"ro"}, "_busy_timeout": {"5000"}}))
	if err != nil {
		rep.Add(false, "open the ledger: %v", err)
		return
	}
	defer db.Close()
	accepted := map[string]int{}
	rows, err := db.QueryContext(ctx, `SELECT terminal, seq FROM events WHERE status = 'accepted'`)
	if err != nil {
		rep.Add(false, "read the ledger: %v", err)
		return
	}
	for rows.Next() {
		var term string
		var seq int64
		if err := rows.Scan(&term, &seq); err != nil {
			rep.Add(false, "read the ledger: %v", err)
		}
		accepted[fmt.Sprintf("%s:%d", term, seq)]++
	}
	rows.Close()
	total := 0
	var missing []string
	for _, c := range cashiers {
		for key := range c.OK() {
			total++
			if accepted[key] != 1 {
				missing = append(missing, fmt.Sprintf("%s (%d times)", key, accepted[key]))
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 5 {
		missing = missing[:5]
	}
	rep.Add(len(missing) == 0 && total > 0, "invariants 1, 2: %d events answered 2xx, each accepted once in the ledger %v", total, missing)
	var live int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM oversells o JOIN events e ON e.terminal = o.terminal AND e.seq = o.seq
		WHERE e.offline = 0`).Scan(&live)
	rep.Add(err == nil && live == 0, "invariant 5: %d oversells by live sales (%v)", live, err)
	var flows, distinct int
	err = db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT business_date || ':' || flow_no) FROM
		(SELECT business_date, flow_no FROM sales UNION ALL SELECT business_date, flow_no FROM refunds)`).Scan(&flows, &distinct)
	rep.Add(err == nil && flows == distinct, "invariant 8: %d flow numbers, %d distinct (%v)", flows, distinct, err)
}
