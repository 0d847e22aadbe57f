package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// A store trades for years on one ledger. The days HQ holds whole and that are older than
// the store keeps at hand (store-server --keep) move to one archive per month, in the
// ledger's directory: archive/ledger-YYYY-MM.db, a ledger of the same tables holding those
// days' events, sales, refunds, their lines and payments, day closes and HQ rows. A day is
// copied, the copy checked against the ledger, the file made durable and put in place, and
// only then is the day deleted from the ledger (each day in its own transaction), leaving
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

// archivedTables are the tables a day's rows are copied from, and how a row is of the day:
// the day's own column, or its event's (lines are keyed by their event).
var archivedTables = []struct {
	name, of string // of: the condition on the ledger's table "t" naming the day (?1)
	check    string // a checksum of its rows, compared between ledger and archive
}{
	{"events", "t.business_date = ?1", "count(*) || '/' || total(seq) || '/' || total(length(payload)) || '/' || total(coalesce(flow_no, 0))"},
	{"sales", "t.business_date = ?1", "count(*) || '/' || total(total) || '/' || total(flow_no)"},
	{"sale_lines", "EXISTS (SELECT 1 FROM %s.sales s WHERE s.terminal = t.terminal AND s.seq = t.seq AND s.business_date = ?1)",
		"count(*) || '/' || total(qty) || '/' || total(amount)"},
	{"payments", "t.business_date = ?1", "count(*) || '/' || total(amount)"},
	{"refunds", "t.business_date = ?1", "count(*) || '/' || total(amount)"},
	{"refund_lines", "EXISTS (SELECT 1 FROM %s.refunds r WHERE r.terminal = t.terminal AND r.seq = t.seq AND r.business_date = ?1)",
		"count(*) || '/' || total(qty) || '/' || total(amount)"},
	{"day_closes", "t.business_date = ?1", "count(*) || '/' || total(length(payload))"},
	{"hq_outbox", "t.business_date = ?1", "count(*) || '/' || total(id)"},
}

// Archive moves the days before before (YYYY-MM-DD) that are out of Redis (HQ held them
// whole: store-server's day sweep), untouched since, not archived yet, and whose HQ rows
// are all at or below ackedThrough (the uploader's acknowledged id), to their month's
// archive, and returns what it moved. A day an event arrives for while it is copied stays
// in the ledger (its copy in the archive is not read) and goes at a later call.
func (l *Ledger) Archive(ctx context.Context, before string, ackedThrough int64) ([]Archived, error) {
	days, err := l.archivable(ctx, before, ackedThrough)
	if err != nil || len(days) == 0 {
		return nil, err
	}
	byMonth := map[string][]string{}
	for _, d := range days {
		byMonth[d[:7]] = append(byMonth[d[:7]], d)
	}
	var out []Archived
	for _, m := range slices.Sorted(maps.Keys(byMonth)) {
		a, err := l.archiveMonth(ctx, byMonth[m], ackedThrough)
		if err != nil {
			return out, fmt.Errorf("archive %s: %w", m, err)
		}
		if len(a.Days) > 0 {
			out = append(out, a)
		}
	}
	return out, nil
}

// archivable lists the days Archive may move.
func (l *Ledger) archivable(ctx context.Context, before string, ackedThrough int64) ([]string, error) {
	var days []string
	err := sqlitedb.Each(ctx, l.db.R, `SELECT r.business_date FROM redis_days r
		WHERE r.business_date < ? AND r.touched = 0
			AND NOT EXISTS (SELECT 1 FROM archived_days a WHERE a.business_date = r.business_date)
			AND NOT EXISTS (SELECT 1 FROM hq_outbox o WHERE o.business_date = r.business_date AND o.id > ?)
		ORDER BY r.business_date`, []any{before, ackedThrough}, func(rows *sql.Rows) error {
		var d string
		if err := rows.Scan(&d); err != nil {
			return err
		}
		days = append(days, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archivable days: %w", err)
	}
	return days, nil
}

// archiveMonth copies days (of one month) into the month's archive, checked, puts it in
// place, and then deletes them from the ledger one by one.
func (l *Ledger) archiveMonth(ctx context.Context, days []string, ackedThrough int64) (Archived, error) {
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
	counts, err := l.copyDays(ctx, tmp, days)
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
	for _, d := range days {
		moved, err := l.pruneDay(ctx, d, filepath.Base(final), counts[d], ackedThrough)
		if err != nil {
			return a, err
		}
		if moved {
			a.Days = append(a.Days, d)
			a.Events += counts[d]
		}
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

// copyDays copies the rows of days from the ledger into the archive at tmp, in one
// transaction that reads one snapshot of the ledger, checks every table's copy against the
// ledger (counts and sums) and the archive's integrity, and returns each day's events.
func (l *Ledger) copyDays(ctx context.Context, tmp string, days []string) (map[string]int64, error) {
	db, err := sql.Open("sqlite3", "file:"+tmp+"?_busy_timeout=10000&_journal_mode=DELETE&_synchronous=FULL")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `ATTACH DATABASE ? AS led`, "file:"+l.db.Path+"?mode=ro"); err != nil {
		return nil, fmt.Errorf("attach the ledger: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	counts := map[string]int64{}
	for _, d := range days {
		// A day copied before and left in the ledger (an event came meanwhile) is copied anew.
		for _, t := range slices.Backward(archivedTables) {
			mainCond := strings.ReplaceAll(t.of, "%s", "main")
			if _, err := tx.ExecContext(ctx, `DELETE FROM main.`+t.name+` AS t WHERE `+mainCond, d); err != nil {
				return nil, fmt.Errorf("clear %s of %s: %w", t.name, d, err)
			}
		}
		for _, t := range archivedTables {
			cond := strings.ReplaceAll(t.of, "%s", "led")
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO main.`+t.name+` SELECT t.* FROM led.`+t.name+` t WHERE `+cond, d); err != nil {
				return nil, fmt.Errorf("copy %s of %s: %w", t.name, d, err)
			}
			var src, dst string
			if err := tx.QueryRowContext(ctx, `SELECT `+t.check+` FROM led.`+t.name+` t WHERE `+cond, d).Scan(&src); err != nil {
				return nil, fmt.Errorf("check %s of %s: %w", t.name, d, err)
			}
			mainCond := strings.ReplaceAll(t.of, "%s", "main")
			if err := tx.QueryRowContext(ctx, `SELECT `+t.check+` FROM main.`+t.name+` t WHERE `+mainCond, d).Scan(&dst); err != nil {
				return nil, fmt.Errorf("check %s of %s: %w", t.name, d, err)
			}
			if src != dst {
				return nil, fmt.Errorf("the archive's %s of %s (%s) differ from the ledger's (%s)", t.name, d, dst, src)
			}
			if t.name == "events" {
				n, _ := strconv.ParseInt(src[:strings.IndexByte(src, '/')], 10, 64)
				counts[d] = n
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `DETACH DATABASE led`); err != nil {
		return nil, err
	}
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil {
		return nil, err
	}
	if check != "ok" {
		return nil, fmt.Errorf("the archive fails its check: %s", check)
	}
	return counts, nil
}

// pruneDay deletes business date d, copied to the archive file with events events, from the
// ledger in one transaction, and reports whether it did: not if an event of the day came
// since it was copied (the day is touched, or holds other events). It books a stock move per
// SKU of the day's sales' lines, keeps each terminal's last event and the HQ row HQ
// acknowledged last, and records the day archived with its highest flow number.
func (l *Ledger) pruneDay(ctx context.Context, d, file string, events, ackedThrough int64) (bool, error) {
	tx, err := l.db.W.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var touched, held, maxFlow int64
	if err := tx.QueryRowContext(ctx, `SELECT (SELECT touched FROM redis_days WHERE business_date = ?1),
		(SELECT count(*) FROM events WHERE business_date = ?1),
		(SELECT coalesce(max(flow_no), 0) FROM events WHERE business_date = ?1)`, d).Scan(&touched, &held, &maxFlow); err != nil {
		return false, fmt.Errorf("prune %s: %w", d, err)
	}
	if touched != 0 || held != events {
		return false, nil
	}
	at := l.now().UTC().Format(timeFormat)
	for _, q := range []string{
		`INSERT INTO stock_moves (sku, delta, reason, ref, at)
			SELECT l.sku, -sum(l.qty), 'archived', 'archive:' || ?1, ?2 FROM sale_lines l
			JOIN sales s ON s.terminal = l.terminal AND s.seq = l.seq WHERE s.business_date = ?1 GROUP BY l.sku`,
		`DELETE FROM sale_lines WHERE EXISTS (SELECT 1 FROM sales s WHERE s.terminal = sale_lines.terminal
			AND s.seq = sale_lines.seq AND s.business_date = ?1)`,
		`DELETE FROM refund_lines WHERE EXISTS (SELECT 1 FROM refunds r WHERE r.terminal = refund_lines.terminal
			AND r.seq = refund_lines.seq AND r.business_date = ?1)`,
		`DELETE FROM payments WHERE business_date = ?1`,
		`DELETE FROM sales WHERE business_date = ?1`,
		`DELETE FROM refunds WHERE business_date = ?1`,
		`DELETE FROM day_closes WHERE business_date = ?1`,
		`DELETE FROM hq_outbox WHERE business_date = ?1 AND id < ?3`,
		`DELETE FROM events WHERE business_date = ?1
			AND seq < (SELECT max(e.seq) FROM events e WHERE e.terminal = events.terminal)`,
		`INSERT INTO archived_days (business_date, file, events, max_flow, archived_ms) VALUES (?1, ?4, ?5, ?6, ?7)`,
	} {
		if _, err := tx.ExecContext(ctx, q, d, at, ackedThrough, file, events, maxFlow, l.now().UnixMilli()); err != nil {
			return false, fmt.Errorf("prune %s: %w", d, err)
		}
	}
	return true, tx.Commit()
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

// archivedFile returns the path of the archive holding business date, when it is archived.
func (l *Ledger) archivedFile(ctx context.Context, q rowQuerier, date string) (string, bool, error) {
	var file string
	err := q.QueryRowContext(ctx, `SELECT file FROM archived_days WHERE business_date = ?`, date).Scan(&file)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("archived day %s: %w", date, err)
	}
	return filepath.Join(l.Dir(), ArchiveDir, file), true, nil
}

// fromArchive runs fn on the archive holding date, opened for reading, if the date is
// archived; otherwise it does nothing.
func (l *Ledger) fromArchive(ctx context.Context, q rowQuerier, date string, fn func(a *sql.DB) error) error {
	path, ok, err := l.archivedFile(ctx, q, date)
	if err != nil || !ok {
		return err
	}
	a, err := sqlitedb.OpenQueryOnly(ctx, path, 1)
	if err != nil {
		return fmt.Errorf("archive of %s: %w", date, err)
	}
	defer a.Close()
	return fn(a)
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
