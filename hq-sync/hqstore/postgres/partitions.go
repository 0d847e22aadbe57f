package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/wire"
)

// partitioned are the tables kept one partition per business date.
var partitioned = []string{"rows", "day_txns"}

// storeParts is how many partitions a day of rows is split into by the hash of the store:
// the stores that upload at once COPY into different tables, not all into the day's one,
// where they queue on its extension lock and its index's pages. Measured with 8 COPYs at
// once (batches of 5,000 sales): 126,000 rows/s and 9.2 µs of PostgreSQL's CPU a row into
// 8 parts, 89,000 and 11.4 µs into one table; with 2 at once, 125,000 against 112,000.
// A day keeps the split it was made with; days made before it (one table each) stay so.
const storeParts = 8

// ddlLock is the advisory lock key that serializes the making and dropping of partitions
// among the serve processes sharing a database.
const ddlLock = 0x706f7367_68710002 // "posg" "hq" 2

// partitionName returns the name of table's partition of business date date: rows_p20261129.
func partitionName(table, date string) string {
	return table + "_p" + strings.ReplaceAll(date, "-", "")
}

// nextDate returns the business date after date (YYYY-MM-DD).
func nextDate(date string) string {
	d, _ := time.Parse(wire.BusinessDate, date)
	return d.AddDate(0, 0, 1).Format(wire.BusinessDate)
}

// partitions remembers, in this process, the days whose partitions it found or made and
// the days HQ dropped (serve --retain), so that a batch asks the database only about a day
// it has not seen. Another process may drop a day this one remembers: storing into it then
// fails, and the batch is tried again after forget.
type partitions struct {
	mu   sync.Mutex
	have map[string]bool // days whose partitions exist
	gone map[string]bool // days dropped
}

func newPartitions() *partitions {
	return &partitions{have: map[string]bool{}, gone: map[string]bool{}}
}

// dropped reports whether day was dropped, as far as prepare has learned.
func (p *partitions) dropped(day string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone[day]
}

// forget makes prepare ask the database again about every day.
func (p *partitions) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.have)
	clear(p.gone)
}

// prepare makes sure each of days has its partitions, unless it was dropped: those it
// finds, those it makes (under ddlLock, each table created apart and then attached, which
// does not stop the batches that store meanwhile), and it notes the days dropped.
func (p *partitions) prepare(ctx context.Context, pool *pgxpool.Pool, days []string) error {
	p.mu.Lock()
	var ask []string
	for _, d := range days {
		if !p.have[d] && !p.gone[d] && !slices.Contains(ask, d) {
			ask = append(ask, d)
		}
	}
	p.mu.Unlock()
	if len(ask) == 0 {
		return nil
	}
	slices.Sort(ask)
	have, gone, err := findPartitions(ctx, pool, ask)
	if err != nil {
		return err
	}
	var missing []string
	for _, d := range ask {
		if !have[d] && !gone[d] {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(ddlLock)); err != nil {
				return err
			}
			// Another process may have made (or dropped) some meanwhile.
			h, g, err := findPartitions(ctx, tx, missing)
			if err != nil {
				return err
			}
			for _, d := range missing {
				if h[d] || g[d] {
					have[d], gone[d] = h[d], g[d]
					continue
				}
				if err := makePartitions(ctx, tx, d); err != nil {
					return err
				}
				have[d] = true
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("make partitions: %w", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for d, ok := range have { // a batch's days may be its body's bytes (serve.DecodeBatch)
		p.have[strings.Clone(d)] = p.have[d] || ok
	}
	for d, ok := range gone {
		p.gone[strings.Clone(d)] = p.gone[d] || ok
	}
	return nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// findPartitions returns which of days have every partition, and which were dropped.
func findPartitions(ctx context.Context, q querier, days []string) (have, gone map[string]bool, err error) {
	have, gone = map[string]bool{}, map[string]bool{}
	names := make([]string, len(days))
	for i, d := range days {
		names[i] = partitionName("rows", d)
	}
	rows, err := q.Query(ctx, `SELECT d, to_regclass(n) IS NOT NULL AND to_regclass(replace(n, 'rows_p', 'day_txns_p')) IS NOT NULL,
			EXISTS (SELECT 1 FROM dropped_days WHERE business_date = d)
		FROM unnest($1::text[], $2::text[]) AS k(d, n)`, days, names)
	if err != nil {
		return nil, nil, fmt.Errorf("find partitions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		var h, g bool
		if err := rows.Scan(&d, &h, &g); err != nil {
			return nil, nil, fmt.Errorf("find partitions: %w", err)
		}
		have[d], gone[d] = h, g
	}
	return have, gone, rows.Err()
}

// makePartitions makes the partitions of day of every partitioned table that lacks one:
// each a table like its parent (its key included), then attached, which takes only a
// SHARE UPDATE EXCLUSIVE lock on the parent (CREATE TABLE ... PARTITION OF would take an
// ACCESS EXCLUSIVE one, and stop every batch and reconciliation meanwhile).
func makePartitions(ctx context.Context, tx pgx.Tx, day string) error {
	for _, t := range partitioned {
		name := pgx.Identifier{partitionName(t, day)}.Sanitize()
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, partitionName(t, day)).Scan(&exists); err != nil {
			return err
		}
		if exists {
			continue
		}
		if t != "rows" {
			if _, err := tx.Exec(ctx, `CREATE TABLE `+name+` (LIKE `+t+` INCLUDING ALL)`); err != nil {
				return fmt.Errorf("%s of %s: %w", t, day, err)
			}
		} else if err := makeStoreParts(ctx, tx, partitionName(t, day)); err != nil {
			return fmt.Errorf("%s of %s: %w", t, day, err)
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE `+t+` ATTACH PARTITION `+name+` FOR VALUES FROM ('`+day+`') TO ('`+nextDate(day)+`')`); err != nil {
			return fmt.Errorf("%s of %s: %w", t, day, err)
		}
	}
	return nil
}

// makeStoreParts makes the table of one day of rows, partitioned by the store's hash into
// storeParts tables (day_h0, day_h1, …), not yet attached to rows.
func makeStoreParts(ctx context.Context, tx pgx.Tx, day string) error {
	name := pgx.Identifier{day}.Sanitize()
	if _, err := tx.Exec(ctx, `CREATE TABLE `+name+` (LIKE rows INCLUDING ALL) PARTITION BY HASH (store)`); err != nil {
		return err
	}
	for k := range storeParts {
		part := pgx.Identifier{fmt.Sprintf("%s_h%d", day, k)}.Sanitize()
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES WITH (MODULUS %d, REMAINDER %d)`,
			part, name, storeParts, k)); err != nil {
			return err
		}
	}
	return nil
}

// missingPartition reports whether err says a day's partition is not there (dropped by
// another process since this one saw it): the batch is tried again once prepare has
// asked the database again.
func missingPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || // undefined_table: the COPY's partition
		(pe.Code == "23514" && strings.Contains(pe.Message, "no partition"))) // routed to none
}

// batchDays returns the business dates a batch stores rows or transactions of.
func batchDays(rows []string, days []string) []string {
	out := slices.Concat(rows, days)
	slices.Sort(out)
	return slices.Compact(out)
}

// PrepareDays implements hqstore.Partitioner: it makes the partitions of the days from
// first to last (YYYY-MM-DD) that lack them, except those dropped.
func (s *Store) PrepareDays(ctx context.Context, first, last string) error {
	from, err1 := time.Parse(wire.BusinessDate, first)
	to, err2 := time.Parse(wire.BusinessDate, last)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("prepare days: %w", err)
	}
	var days []string
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		days = append(days, d.Format(wire.BusinessDate))
	}
	return s.parts.prepare(ctx, s.pool, days)
}

// Retain implements hqstore.Partitioner: it drops the partitions of every day before
// before that a reconciliation of every store has covered (reconcile_runs), with the day's
// declarations and exceptions, and notes the day dropped (dropped_days): rows of it sent
// again later are acknowledged as held. A day not reconciled yet is kept whatever its age.
// Each partition is detached CONCURRENTLY, which lets batches and reconciliations of other
// days go on, and then dropped. One process at a time does it (ddlLock); another returns at
// once with nothing dropped.
func (s *Store) Retain(ctx context.Context, before string) (hqstore.Retained, error) {
	var out hqstore.Retained
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return out, fmt.Errorf("retain: %w", err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(ddlLock)).Scan(&got); err != nil {
		return out, fmt.Errorf("retain: %w", err)
	}
	if !got {
		return out, nil
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(ddlLock))
	days, err := partitionDays(ctx, conn, before)
	if err != nil {
		return out, fmt.Errorf("retain: %w", err)
	}
	unfinished, err := unfinishedDrops(ctx, conn)
	if err != nil {
		return out, fmt.Errorf("retain: %w", err)
	}
	for _, d := range unfinished {
		if !slices.ContainsFunc(days, func(p partitionDay) bool { return p.date == d }) {
			days = append(days, partitionDay{date: d, covered: true})
		}
	}
	for _, d := range days {
		if !d.covered {
			out.Unreconciled = append(out.Unreconciled, d.date)
			continue
		}
		if err := dropDay(ctx, conn, d.date); err != nil {
			return out, fmt.Errorf("retain: drop %s: %w", d.date, err)
		}
		out.Dropped = append(out.Dropped, d.date)
	}
	if len(out.Dropped) > 0 {
		s.parts.forget()
	}
	return out, nil
}

type partitionDay struct {
	date    string
	covered bool // a reconciliation of every store ran to its end for it
}

// partitionDays lists the days before before that have a partition of rows, oldest first.
func partitionDays(ctx context.Context, conn *pgxpool.Conn, before string) ([]partitionDay, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'rows'::regclass ORDER BY c.relname`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []partitionDay
	for _, n := range names {
		digits, ok := strings.CutPrefix(n, "rows_p")
		t, err := time.Parse("20060102", digits)
		if !ok || err != nil {
			continue // not one of ours
		}
		if d := t.Format(wire.BusinessDate); d < before {
			out = append(out, partitionDay{date: d})
		}
	}
	for i := range out {
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM reconcile_runs WHERE business_date = $1 AND store = '')`,
			out[i].date).Scan(&out[i].covered); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// unfinishedDrops lists the days noted dropped whose tables are still there: a drop cut
// short by its context or its process, or whose detach the server finished after the client
// had gone (a detach waiting on readers notices a closed connection only when it is done).
func unfinishedDrops(ctx context.Context, conn *pgxpool.Conn) ([]string, error) {
	q := `SELECT business_date FROM dropped_days WHERE `
	for i, t := range partitioned {
		if i > 0 {
			q += ` OR `
		}
		q += `to_regclass('` + t + `_p' || replace(business_date, '-', '')) IS NOT NULL`
	}
	rows, err := conn.Query(ctx, q+` ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// dropDay notes day dropped, deletes its declarations, exceptions and flow exceptions, and detaches and
// drops its partitions. The note comes first: a batch that stores rows of the day from
// then on counts them as held.
func dropDay(ctx context.Context, conn *pgxpool.Conn, day string) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO dropped_days (business_date, dropped_ms) VALUES ($1, $2)
			ON CONFLICT DO NOTHING`, day, time.Now().UnixMilli()); err != nil {
			return err
		}
		for _, q := range []string{`DELETE FROM days WHERE business_date = $1`,
			`DELETE FROM exceptions WHERE business_date = $1`,
			`DELETE FROM flow_exceptions WHERE business_date = $1`} {
			if _, err := tx.Exec(ctx, q, day); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, t := range partitioned {
		name := pgx.Identifier{partitionName(t, day)}.Sanitize()
		// A detach cut short (its context ended, its process killed) leaves the partition
		// attached but pending detach, which only FINALIZE completes.
		var pending *bool
		err := conn.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = to_regclass($1)
			AND inhparent = $2::regclass`, partitionName(t, day), t).Scan(&pending)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		how := " CONCURRENTLY"
		if pending != nil && *pending {
			how = " FINALIZE"
		}
		if pending != nil {
			if _, err := conn.Exec(ctx, `ALTER TABLE `+t+` DETACH PARTITION `+name+how); err != nil {
				return err
			}
		}
		if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS `+name); err != nil {
			return err
		}
	}
	return nil
}

// RecordReconcile implements hqstore.Storage.
func (s *Store) RecordReconcile(ctx context.Context, r hqstore.ReconcileRun) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO reconcile_runs (business_date, store, finished_ms, ok, stores, hq_txns, differences)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`, r.Date, r.Store, r.Finished.UnixMilli(), r.OK,
		r.Stores, r.HQTxns, r.Differences)
	if err != nil {
		return fmt.Errorf("record reconciliation of %s: %w", r.Date, err)
	}
	return nil
}
