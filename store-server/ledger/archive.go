package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// A store trades for years on one ledger. The days HQ holds whole and that are older than
// the store keeps at hand (store-server --keep) move to one archive per month, in the
// ledger's directory: archive/ledger-YYYY-MM.db, a ledger of the same tables holding those
// days' events, sales, refunds, their lines and payments, day closes and HQ rows. A day is
// copied, the copy checked against the ledger, the file made durable and put in place, and
// only then is the day deleted from the ledger (a month's days in one transaction), leaving
// in its place: a stock move per SKU of its sales' lines ('archived', so that stock stays
// provable), its highest flow number (archived_days), and each terminal's last event (the
// ledger's next seq of a terminal idle since). The readers of a day (Totals, DayCloses,
// DayManifest) read its archive too; a backup carries the archives.

// ArchiveDir is the directory of the archives, in the ledger's.
const ArchiveDir = "archive"

// ArchiveFile returns the name of the archive of business date's month.
func ArchiveFile(date string) string { return "ledger-" + date[:7] + ".db" }

// ArchivePath returns the path of the archive that holds date, in the ledger's directory.
func (l *Ledger) ArchivePath(date string) string {
	return filepath.Join(l.Dir(), ArchiveDir, ArchiveFile(date))
}

// Archived is what Archive moved of one month.
type Archived struct {
	File   string   // the archive's path
	Days   []string // the days moved out of the ledger
	Events int64    // their events
}

// archivedTables are the tables a day's rows are copied from, and how a row is of the days
// moved: the condition on table "t" of database {db} naming them ({days}: the list of
// their dates), the day's own column or, for lines (sale_lines and refund_lines), their
// sale's or refund's. Each condition reads the days by index (schema/store/002). key and
// keyOf name a row by its key (its sale's or refund's for lines) and the ledger's table
// holding those keys: a day already archived takes the ledger's rows of it (events that
// came after it was moved) into its archive in place of the archive's rows of the same keys.
var archivedTables = []struct {
	name, of   string
	key, keyOf string
	check      string // a checksum of its rows, compared between ledger and archive
}{
	{"events", "t.business_date IN ({days})", "terminal, seq", "events",
		"count(*) || '/' || total(seq) || '/' || total(length(payload)) || '/' || total(coalesce(flow_no, 0))"},
	{"sales", "t.business_date IN ({days})", "business_date, flow_no", "sales", "count(*) || '/' || total(total) || '/' || total(flow_no)"},
	{"sale_lines", "(t.terminal, t.seq) IN (SELECT terminal, seq FROM {db}.sales WHERE business_date IN ({days}))",
		"terminal, seq", "sales", "count(*) || '/' || total(qty) || '/' || total(amount)"},
	{"payments", "t.business_date IN ({days})", "business_date, flow_no, n", "payments", "count(*) || '/' || total(amount)"},
	{"refunds", "t.business_date IN ({days})", "terminal, seq", "refunds", "count(*) || '/' || total(amount)"},
	{"refund_lines", "(t.terminal, t.seq) IN (SELECT terminal, seq FROM {db}.refunds WHERE business_date IN ({days}))",
		"terminal, seq", "refunds", "count(*) || '/' || total(qty) || '/' || total(amount)"},
	{"day_closes", "t.business_date IN ({days})", "terminal, business_date", "day_closes", "count(*) || '/' || total(length(payload))"},
	{"hq_outbox", "t.business_date IN ({days})", "id", "hq_outbox", "count(*) || '/' || total(id)"},
}

// keyedCond returns the condition on table "t" of the archive naming the rows whose keys
// the ledger (led) holds of days ({days} as in daysCond).
func keyedCond(key, keyOf string) string {
	return "(" + prefixed("t.", key) + ") IN (SELECT " + key + " FROM led." + keyOf + " WHERE business_date IN ({days}))"
}

// prefixed returns the comma-separated columns cols, each with prefix p.
func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

// daysCond returns cond for database db and n days (n placeholders), and the days as
// arguments.
func daysCond(cond, db string, days []string) (string, []any) {
	cond = strings.ReplaceAll(cond, "{db}", db)
	cond = strings.ReplaceAll(cond, "{days}", strings.TrimSuffix(strings.Repeat("?,", len(days)), ","))
	args := make([]any, len(days))
	for i, d := range days {
		args[i] = d
	}
	return cond, args
}

// Archive moves the days before before (YYYY-MM-DD) that are out of Redis (HQ held them
// whole: store-server's day sweep), untouched since, and whose HQ rows are all at or below
// ackedThrough (the uploader's acknowledged id), to their month's archive, and returns what
// it moved. A day archived already whose events came after it was moved (a till offline
// past --keep) moves again: those events, and what they booked, go into its archive beside
// the rest. A day an event arrives for while it is copied stays in the ledger (its copy in
// the archive is not read: the readers of an archived day read its archive up to the
// day's archived flow number) and goes at a later call.
func (l *Ledger) Archive(ctx context.Context, before string, ackedThrough int64) ([]Archived, error) {
	days, again, err := l.archivable(ctx, before, ackedThrough)
	if err != nil || len(days) == 0 {
		return nil, err
	}
	byMonth := map[string][]string{}
	for _, d := range days {
		byMonth[d[:7]] = append(byMonth[d[:7]], d)
	}
	var out []Archived
	for _, m := range slices.Sorted(maps.Keys(byMonth)) {
		a, err := l.archiveMonth(ctx, byMonth[m], again, ackedThrough)
		if err != nil {
			return out, fmt.Errorf("archive %s: %w", m, err)
		}
		if len(a.Days) > 0 {
			out = append(out, a)
		}
	}
	return out, nil
}

// archivable lists the days Archive may move, and of them those archived already (again):
// an archived day the ledger holds a sale, refund or day close of, or an event that is not
// its terminal's last (the ledger keeps each terminal's last event, and the HQ row
// acknowledged last).
func (l *Ledger) archivable(ctx context.Context, before string, ackedThrough int64) ([]string, map[string]bool, error) {
	var days []string
	again := map[string]bool{}
	err := sqlitedb.Each(ctx, l.db.R, `SELECT r.business_date,
			EXISTS (SELECT 1 FROM archived_days a WHERE a.business_date = r.business_date) AS archived
		FROM redis_days r
		WHERE r.business_date < ?1 AND r.touched = 0
			AND NOT EXISTS (SELECT 1 FROM hq_outbox o WHERE o.business_date = r.business_date AND o.id > ?2)
			AND (NOT EXISTS (SELECT 1 FROM archived_days a WHERE a.business_date = r.business_date)
				OR EXISTS (SELECT 1 FROM sales s WHERE s.business_date = r.business_date)
				OR EXISTS (SELECT 1 FROM refunds f WHERE f.business_date = r.business_date)
				OR EXISTS (SELECT 1 FROM day_closes c WHERE c.business_date = r.business_date)
				OR EXISTS (SELECT 1 FROM events e WHERE e.business_date = r.business_date
					AND e.seq < (SELECT max(x.seq) FROM events x WHERE x.terminal = e.terminal)))
		ORDER BY r.business_date`, []any{before, ackedThrough}, func(rows *sql.Rows) error {
		var d string
		var archived bool
		if err := rows.Scan(&d, &archived); err != nil {
			return err
		}
		days = append(days, d)
		if archived {
			again[d] = true
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("archivable days: %w", err)
	}
	return days, again, nil
}

// archiveMonth copies days (of one month; those in again archived already) into the
// month's archive, checked, puts it in place, and then deletes them from the ledger.
func (l *Ledger) archiveMonth(ctx context.Context, days []string, again map[string]bool, ackedThrough int64) (Archived, error) {
	final := l.ArchivePath(days[0])
	a := Archived{File: final}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return a, err
	}
	tmp := final + ".new"
	os.Remove(tmp)
	defer os.Remove(tmp)
	if err := startArchive(ctx, final, tmp, l.storeID); err != nil {
		return a, err
	}
	var fresh, merged []string
	for _, d := range days {
		if again[d] {
			merged = append(merged, d)
		} else {
			fresh = append(fresh, d)
		}
	}
	counts, err := l.copyDays(ctx, tmp, fresh, merged)
	if err != nil {
		return a, err
	}
	if err := syncFile(tmp); err != nil {
		return a, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return a, err
	}
	if err := syncFile(filepath.Dir(final)); err != nil {
		return a, err
	}
	if a.Days, err = l.pruneDays(ctx, days, filepath.Base(final), counts, ackedThrough); err != nil {
		return a, err
	}
	for _, d := range a.Days {
		a.Events += counts.copied[d]
	}
	return a, nil
}

// startArchive makes tmp the month's archive to add to: a copy of the archive at final if
// there is one, or a new, empty ledger of the store's.
func startArchive(ctx context.Context, final, tmp, store string) error {
	if src, err := os.Open(final); err == nil {
		defer src.Close()
		dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(dst, src)
		return errors.Join(err, dst.Close())
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	db, err := sqlitedb.Open(ctx, tmp, schema.Store())
	if err != nil {
		return err
	}
	_, err = db.W.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('store_id', ?), ('archive', 'days moved out of the ledger')`, store)
	return errors.Join(err, db.Close())
}

// dayCounts are the events of the days copied: copied, the ledger's as copied; archived,
// the archive's after the copy (a day archived again: those moved before too).
type dayCounts struct{ copied, archived map[string]int64 }

// copyDays copies the rows of days from the ledger into the archive at tmp, in one
// transaction that reads one snapshot of the ledger, checks every table's copy against the
// ledger (counts and sums) and the archive's integrity. fresh are days not archived yet:
// their rows in the archive (a copy whose day then stayed in the ledger) are replaced
// whole. merged are days archived already: the ledger's rows of them replace the
// archive's rows of the same keys, and the rest of the archive's stay.
func (l *Ledger) copyDays(ctx context.Context, tmp string, fresh, merged []string) (dayCounts, error) {
	var counts dayCounts
	db, err := sql.Open("sqlite3", sqlitedb.URI(tmp, url.Values{"_busy_timeout": {"10000"}, "_journal_mode": {"DELETE"},
		"_synchronous": {"FULL"}}))
	if err != nil {
		return counts, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `ATTACH DATABASE ? AS led`, sqlitedb.URI(l.db.Path, url.Values{"mode": {"ro"}})); err != nil {
		return counts, fmt.Errorf("attach the ledger: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return counts, err
	}
	defer tx.Rollback()
	for _, t := range slices.Backward(archivedTables) {
		for _, c := range []struct {
			days []string
			cond string
		}{{fresh, daysCondOf(t.of, "main")}, {merged, keyedCond(t.key, t.keyOf)}} {
			if len(c.days) == 0 {
				continue
			}
			cond, args := daysCond(c.cond, "main", c.days)
			if _, err := tx.ExecContext(ctx, `DELETE FROM main.`+t.name+` AS t WHERE `+cond, args...); err != nil {
				return counts, fmt.Errorf("clear %s: %w", t.name, err)
			}
		}
	}
	all := append(slices.Clone(fresh), merged...)
	for _, t := range archivedTables {
		if err := copyTable(ctx, tx, t.name, t.of, t.check, keyedCond(t.key, t.keyOf), all); err != nil {
			return counts, err
		}
	}
	if counts.copied, err = eventsPerDay(ctx, tx, "led", all); err != nil {
		return counts, err
	}
	if counts.archived, err = eventsPerDay(ctx, tx, "main", all); err != nil {
		return counts, err
	}
	if err := tx.Commit(); err != nil {
		return counts, err
	}
	if _, err := db.ExecContext(ctx, `DETACH DATABASE led`); err != nil {
		return counts, err
	}
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil {
		return counts, err
	}
	if check != "ok" {
		return counts, fmt.Errorf("the archive fails its check: %s", check)
	}
	return counts, nil
}

// daysCondOf is cond with its {db} named (daysCond names {days}).
func daysCondOf(cond, db string) string { return strings.ReplaceAll(cond, "{db}", db) }

// copyTable copies table name's rows of days (cond of) from the ledger into the archive
// and checks that the archive's rows of the keys copied (keyed) sum as the ledger's do.
func copyTable(ctx context.Context, tx *sql.Tx, name, of, check, keyed string, days []string) error {
	cond, args := daysCond(of, "led", days)
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO main.`+name+` SELECT t.* FROM led.`+name+` t WHERE `+cond, args...); err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	var src, dst string
	if err := tx.QueryRowContext(ctx, `SELECT `+check+` FROM led.`+name+` t WHERE `+cond, args...).Scan(&src); err != nil {
		return fmt.Errorf("check %s: %w", name, err)
	}
	mainCond, _ := daysCond(keyed, "main", days)
	if err := tx.QueryRowContext(ctx, `SELECT `+check+` FROM main.`+name+` t WHERE `+mainCond, args...).Scan(&dst); err != nil {
		return fmt.Errorf("check %s: %w", name, err)
	}
	if src != dst {
		return fmt.Errorf("the archive's %s (%s) differ from the ledger's (%s)", name, dst, src)
	}
	return nil
}

// eventsPerDay counts the events of days in database db.
func eventsPerDay(ctx context.Context, q sqlitedb.Querier, db string, days []string) (map[string]int64, error) {
	cond, args := daysCond("business_date IN ({days})", db, days)
	out := map[string]int64{}
	err := sqlitedb.Each(ctx, q, `SELECT business_date, count(*) FROM `+db+`.events WHERE `+cond+` GROUP BY 1`, args,
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
		return nil, fmt.Errorf("events of the days: %w", err)
	}
	return out, nil
}

// pruneDays deletes days, copied to the archive file (counts), from the ledger in one
// transaction, and returns those it deleted: not a day an event came for since it was
// copied (the day is touched, or holds other events). It books a stock move per SKU of
// the days' sales' lines, keeps each terminal's last event and the HQ row HQ acknowledged
// last, and records each day archived with its highest flow number and the events its
// archive holds.
func (l *Ledger) pruneDays(ctx context.Context, days []string, file string, counts dayCounts, ackedThrough int64) ([]string, error) {
	tx, err := l.db.W.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	held, err := eventsPerDay(ctx, tx, "main", days)
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, d := range days {
		var touched, maxFlow int64
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT touched FROM redis_days WHERE business_date = ?1),
			(SELECT coalesce(max(flow_no), 0) FROM events WHERE business_date = ?1 AND flow_no IS NOT NULL)`, d).
			Scan(&touched, &maxFlow); err != nil {
			return nil, fmt.Errorf("prune %s: %w", d, err)
		}
		if touched != 0 || held[d] != counts.copied[d] {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO archived_days (business_date, file, events, max_flow, archived_ms)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (business_date) DO UPDATE SET events = excluded.events,
				max_flow = max(max_flow, excluded.max_flow), archived_ms = excluded.archived_ms`,
			d, file, counts.archived[d], maxFlow, l.now().UnixMilli()); err != nil {
			return nil, fmt.Errorf("prune %s: %w", d, err)
		}
		gone = append(gone, d)
	}
	if len(gone) == 0 {
		return nil, nil
	}
	if err := l.deleteDays(ctx, tx, gone, ackedThrough); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	l.daysMu.Lock()
	l.archSeqs = nil // read again
	l.daysMu.Unlock()
	return gone, nil
}

// deleteDays deletes the rows of days gone, in their archive now, from the ledger in tx.
func (l *Ledger) deleteDays(ctx context.Context, tx *sql.Tx, gone []string, ackedThrough int64) error {
	at := l.now().UTC().Format(timeFormat)
	for _, q := range []string{
		`INSERT INTO stock_moves (sku, delta, reason, ref, at)
			SELECT sku, -sum(qty), 'archived', 'archive:' || substr(?, 1, 7), ? FROM sale_lines
			WHERE (terminal, seq) IN (SELECT terminal, seq FROM sales WHERE business_date IN ({days})) GROUP BY sku`,
		`DELETE FROM sale_lines WHERE (terminal, seq) IN (SELECT terminal, seq FROM sales WHERE business_date IN ({days}))`,
		`DELETE FROM refund_lines WHERE (terminal, seq) IN (SELECT terminal, seq FROM refunds WHERE business_date IN ({days}))`,
		`DELETE FROM payments WHERE business_date IN ({days})`,
		`DELETE FROM sales WHERE business_date IN ({days})`,
		`DELETE FROM refunds WHERE business_date IN ({days})`,
		`DELETE FROM day_closes WHERE business_date IN ({days})`,
		`DELETE FROM hq_outbox WHERE id < ? AND business_date IN ({days})`,
		`INSERT INTO archived_seqs (terminal, max_seq)
			SELECT terminal, max(seq) FROM events WHERE business_date IN ({days})
				AND seq < (SELECT max(e.seq) FROM events e WHERE e.terminal = events.terminal) GROUP BY terminal
			ON CONFLICT (terminal) DO UPDATE SET max_seq = max(max_seq, excluded.max_seq)`,
		`DELETE FROM events WHERE business_date IN ({days})
			AND seq < (SELECT max(e.seq) FROM events e WHERE e.terminal = events.terminal)`,
	} {
		q, args := daysCond(q, "main", gone)
		switch {
		case strings.HasPrefix(q, "INSERT INTO stock_moves"):
			args = append([]any{gone[0], at}, args...)
		case strings.Contains(q, "id < ?"):
			args = append([]any{ackedThrough}, args...)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("prune %s: %w", strings.Join(gone, ","), err)
		}
	}
	return nil
}

// archivedSeq returns the highest seq of terminal whose event moved to an archive (0: none).
func (l *Ledger) archivedSeq(terminal string) (int64, error) {
	l.daysMu.RLock()
	m := l.archSeqs
	l.daysMu.RUnlock()
	if m == nil {
		m = map[string]int64{}
		err := sqlitedb.Each(context.Background(), l.db.R, `SELECT terminal, max_seq FROM archived_seqs`, nil,
			func(rows *sql.Rows) error {
				var t string
				var seq int64
				if err := rows.Scan(&t, &seq); err != nil {
					return err
				}
				m[t] = seq
				return nil
			})
		if err != nil {
			return 0, fmt.Errorf("archived seqs: %w", err)
		}
		l.daysMu.Lock()
		l.archSeqs = m
		l.daysMu.Unlock()
	}
	return m[terminal], nil
}

// lookupArchived is Lookup in the archives, newest first, for a key at or below its
// terminal's archived seq.
func (l *Ledger) lookupArchived(ctx context.Context, terminal string, seq int64) (Stored, bool, error) {
	top, err := l.archivedSeq(terminal)
	if err != nil || seq > top {
		return Stored{}, false, err
	}
	files, err := l.ArchiveFiles()
	if err != nil {
		return Stored{}, false, err
	}
	for _, f := range slices.Backward(files) {
		a, err := sqlitedb.OpenQueryOnly(ctx, f, 1)
		if err != nil {
			return Stored{}, false, fmt.Errorf("archive %s: %w", filepath.Base(f), err)
		}
		s, ok, err := scanStored(a.QueryRowContext(ctx, lookupQuery, terminal, seq))
		a.Close()
		if err != nil || ok {
			return s, ok, err
		}
	}
	return Stored{}, false, nil
}

// archivedPrior is what an archive holds, final, for a key the ledger does not: a commit
// answers a delivery of it again as a duplicate or a conflict. An archive that cannot be
// read is nil: the record is decided as the ledger holds nothing of it.
func (l *Ledger) archivedPrior(terminal string, seq int64) *known {
	s, ok, err := l.lookupArchived(context.Background(), terminal, seq)
	if err != nil || !ok || !s.Final {
		return nil
	}
	return &known{Stored: s, row: -1}
}

// syncFile makes a file (or a directory's entries) durable.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// rowQuerier is what reads the ledger: its read pool, or a read transaction of it.
type rowQuerier interface {
	sqlitedb.Querier
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// archivedFile returns the path of the archive holding business date, when it is archived,
// and the day's highest flow number archived: rows of the day above it in the archive are
// a copy whose move did not complete (the ledger holds them) and are not the archive's.
func (l *Ledger) archivedFile(ctx context.Context, q rowQuerier, date string) (string, int64, bool, error) {
	var file string
	var maxFlow int64
	err := q.QueryRowContext(ctx, `SELECT file, max_flow FROM archived_days WHERE business_date = ?`, date).Scan(&file, &maxFlow)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("archived day %s: %w", date, err)
	}
	return filepath.Join(l.Dir(), ArchiveDir, file), maxFlow, true, nil
}

// fromArchive runs fn on the archive holding date, opened for reading, with the day's
// highest flow number archived (fn reads the day's sales and refunds up to it), if the
// date is archived; otherwise it does nothing.
func (l *Ledger) fromArchive(ctx context.Context, q rowQuerier, date string, fn func(a *sql.DB, maxFlow int64) error) error {
	path, maxFlow, ok, err := l.archivedFile(ctx, q, date)
	if err != nil || !ok {
		return err
	}
	a, err := sqlitedb.OpenQueryOnly(ctx, path, 1)
	if err != nil {
		return fmt.Errorf("archive of %s: %w", date, err)
	}
	defer a.Close()
	return fn(a, maxFlow)
}

// archivedFlow returns the event (terminal:seq) holding flow number f.flow of an archived
// day in the day's archive, and whether one does. A replay may bring a number of a day the
// ledger archived since (a till that kept an event for months): the ledger's events no
// longer show the number taken, and the replay keeping it would print one receipt number
// twice in a day. Only a day out of Redis is ever archived (Archive takes its days from
// redis_days), which the ledger knows in memory: any other day costs nothing. For such a
// day, one lookup of archived_days; the archive is opened only for a number at or below
// the day's highest archived.
func (l *Ledger) archivedFlow(ctx context.Context, q rowQuerier, f flowKey) (string, bool, error) {
	if !l.redisExpired(f.date) {
		return "", false, nil
	}
	var holder string
	found := false
	err := l.fromArchive(ctx, q, f.date, func(a *sql.DB, maxFlow int64) error {
		if f.flow > maxFlow {
			return nil
		}
		err := a.QueryRowContext(ctx, selFlowHolder, f.date, f.flow).Scan(&holder)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return "", false, fmt.Errorf("flow number %d of %s in its archive: %w", f.flow, f.date, err)
	}
	return holder, found, nil
}

// ArchiveFiles returns the paths of the archives, in name order.
func (l *Ledger) ArchiveFiles() ([]string, error) {
	files, err := filepath.Glob(filepath.Join(l.Dir(), ArchiveDir, "ledger-*.db"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	return files, nil
}
