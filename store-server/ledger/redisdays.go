package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"maps"

	"github.com/posgate/posgate/internal/sqlitedb"
)

// The business days whose keys left Redis (redis_days). The store lets a closed day's keys
// go once HQ has acknowledged the day (store-server's day sweep): the ledger keeps the day,
// Redis need not. The ledger remembers which days, so that a rebuild leaves them out and an
// event of such a day takes its flow number from the ledger (takeFlow).

// loadRedisDays reads the days whose keys left Redis into memory.
func (l *Ledger) loadRedisDays(ctx context.Context) error {
	days := map[string]bool{}
	err := sqlitedb.Each(ctx, l.db.R, `SELECT business_date FROM redis_days`, nil, func(rows *sql.Rows) error {
		var d string
		if err := rows.Scan(&d); err != nil {
			return err
		}
		days[d] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("days out of redis: %w", err)
	}
	l.daysMu.Lock()
	l.expired = days
	l.daysMu.Unlock()
	return nil
}

// redisExpired reports whether the keys of business date left Redis.
func (l *Ledger) redisExpired(date string) bool {
	l.daysMu.RLock()
	defer l.daysMu.RUnlock()
	return l.expired[date]
}

// LeftRedis reports whether the keys of business date left Redis (ExpireFromRedis): Redis's
// counters of such a date are not the ledger's (an event of the day arriving later makes
// them anew, from zero, until the day sweep deletes them again), and are not compared.
func (l *Ledger) LeftRedis(date string) bool { return l.redisExpired(date) }

// expiredDays returns a copy of the days whose keys left Redis.
func (l *Ledger) expiredDays() map[string]bool {
	l.daysMu.RLock()
	defer l.daysMu.RUnlock()
	return maps.Clone(l.expired)
}

// DaysInRedis returns, in order, the business days before before (YYYY-MM-DD) that have
// sales or refunds (flow numbers) and whose keys are still in Redis: those the store's day
// sweep may let go once HQ has acknowledged them. It reads one index entry per day, not
// the days' events.
func (l *Ledger) DaysInRedis(ctx context.Context, before string) ([]string, error) {
	days, err := flowDays(ctx, l.db.R)
	if err != nil {
		return nil, fmt.Errorf("days in redis: %w", err)
	}
	expired := l.expiredDays()
	var out []string
	for _, d := range days {
		if d.date < before && !expired[d.date] {
			out = append(out, d.date)
		}
	}
	return out, nil
}

// ExpireFromRedis records that the keys of business date go from Redis, and returns the
// touch count the caller passes to KeysGone once it has deleted them (until then the day
// counts as touched: its keys are to go). From now on an event of the day takes its flow
// number from the ledger.
func (l *Ledger) ExpireFromRedis(ctx context.Context, date string) (int64, error) {
	var touched int64
	err := l.db.W.QueryRowContext(ctx, `INSERT INTO redis_days (business_date, expired_ms, touched) VALUES (?, ?, 1)
		ON CONFLICT (business_date) DO UPDATE SET touched = touched + 1 RETURNING touched`,
		date, l.now().UnixMilli()).Scan(&touched)
	if err != nil {
		return 0, fmt.Errorf("expire %s from redis: %w", date, err)
	}
	l.daysMu.Lock()
	l.expired[date] = true
	l.daysMu.Unlock()
	return touched, nil
}

// TouchedDays returns the days out of Redis whose keys are to go (again): an event of the
// day came after they went (the gate made them anew), or their deletion was not confirmed.
// Each comes with its touch count, for KeysGone.
func (l *Ledger) TouchedDays(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := sqlitedb.Each(ctx, l.db.R, `SELECT business_date, touched FROM redis_days WHERE touched > 0`, nil,
		func(rows *sql.Rows) error {
			var d string
			var n int64
			if err := rows.Scan(&d, &n); err != nil {
				return err
			}
			out[d] = n
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("touched days: %w", err)
	}
	return out, nil
}

// KeysGone records that the keys of date left Redis as of touch count seen: unless an event
// of the day came since (the count moved on), the day is no longer touched.
func (l *Ledger) KeysGone(ctx context.Context, date string, seen int64) error {
	if _, err := l.db.W.ExecContext(ctx, `UPDATE redis_days SET touched = 0 WHERE business_date = ? AND touched = ?`,
		date, seen); err != nil {
		return fmt.Errorf("keys of %s gone: %w", date, err)
	}
	return nil
}

// flowDay is a business day with flow numbers, and its highest.
type flowDay struct {
	date string
	max  int64
}

// flowDays returns every business day with flow numbers in the ledger (not its archive)
// and the day's highest, in date order: two index lookups per day (a skip scan of
// events_flow), however many events each day has.
func flowDays(ctx context.Context, q sqlitedb.Querier) ([]flowDay, error) {
	var out []flowDay
	err := sqlitedb.Each(ctx, q, `WITH RECURSIVE d(day) AS (
			SELECT min(business_date) FROM events WHERE flow_no IS NOT NULL
			UNION ALL
			SELECT (SELECT min(business_date) FROM events WHERE flow_no IS NOT NULL AND business_date > d.day)
			FROM d WHERE d.day IS NOT NULL
		)
		SELECT day, (SELECT max(flow_no) FROM events WHERE business_date = d.day AND flow_no IS NOT NULL)
		FROM d WHERE day IS NOT NULL`, nil, func(rows *sql.Rows) error {
		var d flowDay
		if err := rows.Scan(&d.date, &d.max); err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	return out, err
}
