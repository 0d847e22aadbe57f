package upload

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// batch is a recorded batch as the state holds it.
type batch struct {
	id          string
	firstID     int64
	lastID      int64
	rows        int
	dates       map[string]int    // business date → rows of that date in the batch
	days        map[string]int64  // business date → revision declared whole
	parts       map[string]partOf // business date → the part of a declaration in parts
	lastKey     string
	xThrough    int64 // the exception change its receipt acknowledges through (0: none carried)
	body        []byte
	contentHash string
	attempts    int
}

// pending returns the recorded batch HQ has not acknowledged, if any.
func (u *Uploader) pending(ctx context.Context) (*batch, error) {
	var b batch
	var dates, days, parts string
	err := u.state.R.QueryRowContext(ctx, `SELECT batch_id, first_id, last_id, rows, dates, days, parts, last_key,
		exceptions_through, content_hash, body, attempts FROM batches WHERE state = 'pending'`).Scan(&b.id, &b.firstID,
		&b.lastID, &b.rows, &dates, &days, &parts, &b.lastKey, &b.xThrough, &b.contentHash, &b.body, &b.attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pending batch: %w", err)
	}
	if err := json.Unmarshal([]byte(dates), &b.dates); err != nil {
		return nil, fmt.Errorf("pending batch %s: %w", b.id, err)
	}
	if err := json.Unmarshal([]byte(days), &b.days); err != nil {
		return nil, fmt.Errorf("pending batch %s: %w", b.id, err)
	}
	if err := json.Unmarshal([]byte(parts), &b.parts); err != nil {
		return nil, fmt.Errorf("pending batch %s: %w", b.id, err)
	}
	if hqwire.ContentHash(b.body) != b.contentHash {
		return nil, fmt.Errorf("pending batch %s: the stored body does not match its hash", b.id)
	}
	return &b, nil
}

// draft is the next batch as build makes it: what it holds so far, how much room that
// takes, and what build learned on the way of the days due.
type draft struct {
	out      hqwire.Batch
	through  int64              // the watermark: the last row HQ acknowledged
	sentKey  string             // that row's key
	xThrough int64              // the exception change HQ acknowledged changes through
	now      time.Time          // when the batch is built (Config.Now)
	budget   int                // body bytes the rows and days of a batch may take
	parts    map[string]partOf  // the parts this batch carries
	used     int                // body bytes taken by the days and rows so far
	rows     []ledger.OutboxRow // the rows after the watermark, once they are due
	xs       []hqwire.Exception // the exceptions this batch carries
	xCursor  int64              // the change the batch's receipt acknowledges exceptions through
	xFull    bool               // more changes than one batch takes wait: the batch is due
	tooLarge []string           // due days whose declaration HQ could not take even in parts
	split    []splitDay         // due days too large for one batch, split into parts here
}

// add puts declaration d (n bytes of JSON; covered: see partOf) in the batch if it fits.
func (next *draft) add(d hqwire.StoreDay, covered int64, n int) bool {
	if len(next.out.Days) > 0 && next.used+n > next.budget {
		return false // the next batch declares the rest
	}
	next.used += n
	next.out.Days = append(next.out.Days, d)
	if d.InParts() {
		next.parts[d.BusinessDate] = partOf{Revision: d.Revision, Part: d.Part, Parts: d.Parts, Covered: covered}
	}
	return true
}

// build makes the next batch from the ledger rows after the watermark and the declarations
// that are due, or returns nil when there is nothing to send yet.
func (u *Uploader) build(ctx context.Context, force bool) (*batch, error) {
	// A ledger the tills refilled after it lost rows HQ acknowledged: on from there.
	if _, err := u.resumeCaughtUp(ctx); err != nil {
		return nil, err
	}
	kv, err := u.kv(ctx)
	if err != nil {
		return nil, err
	}
	now := u.cfg.Now()
	today := now.In(u.cfg.Location).Format(wire.BusinessDate)
	candidates, err := u.undeclared(ctx, today)
	if err != nil {
		return nil, err
	}
	waiting, err := u.waitingParts(ctx)
	if err != nil {
		return nil, err
	}
	next := &draft{
		out: hqwire.Batch{V: hqwire.Version, Store: u.cfg.Store, ID: batchID(u.cfg.Store, kv["batch_series"], atoi(kv["next_batch"])+1),
			SentAt: now.UTC()},
		through: atoi(kv["sent_through"]), sentKey: kv["sent_key"], xThrough: atoi(kv["exceptions_through"]), now: now,
		budget: u.budget, parts: map[string]partOf{},
	}
	// The next part of each day being declared in parts goes first: HQ keeps the parts
	// aside until the last one, so the day stands at HQ only when they have all gone.
	for _, w := range waiting {
		if !next.add(w.day, w.covered, w.size) {
			break
		}
	}
	err = u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
		return u.fill(ctx, r, next, candidates, waiting, force)
	})
	if err != nil {
		return nil, fmt.Errorf("build batch: %w", err)
	}
	if err := u.keepParts(ctx, next.split); err != nil {
		return nil, fmt.Errorf("build batch: %w", err)
	}
	for _, date := range next.tooLarge {
		if _, err := u.state.W.ExecContext(ctx, `UPDATE days SET skipped_rows = sent_rows WHERE business_date = ?`,
			date); err != nil {
			return nil, fmt.Errorf("build batch: %w", err)
		}
	}
	if len(next.out.Days) == 0 && len(next.rows) == 0 && len(next.xs) == 0 {
		return nil, nil
	}
	return u.seal(next)
}

// fill reads what the next batch takes from one snapshot of the ledger: the declarations
// due, the exception changes, and the rows after the watermark once they are due.
func (u *Uploader) fill(ctx context.Context, r *ledger.HQReader, next *draft, candidates []undeclaredDay,
	waiting waitingList, force bool) error {
	// The ledger may have been restored from a backup under the running uploader, as it
	// may before a start (claim): rows sold since took ids up to the watermark again, and
	// nothing is read from a ledger that no longer holds the last row HQ acknowledged.
	through := next.through
	if through > 0 {
		held, err := uploadstate.RowHeld(ctx, r, through, next.sentKey)
		if err != nil {
			return err
		}
		if !held {
			return u.behind(through, next.sentKey)
		}
	}
	if err := u.declareDays(ctx, r, next, candidates, waiting); err != nil {
		return err
	}
	maxID, err := r.OutboxMaxID(ctx)
	if err != nil {
		return err
	}
	if err := u.addExceptions(ctx, r, next, maxID); err != nil {
		return err
	}
	if maxID <= through && len(next.xs) == 0 {
		u.firstSeen = time.Time{}
		return nil
	}
	if u.firstSeen.IsZero() {
		u.firstSeen = time.Now()
	}
	if !force && len(next.out.Days) == 0 && !next.xFull && maxID-through < int64(u.cfg.BatchRows) &&
		time.Since(u.firstSeen) < u.cfg.BatchAge {
		// Exception changes wait with the rows (in a store whose sales oversell, no
		// stock counted, each sale is one), unless they fill a batch.
		next.xs, next.xCursor = nil, 0
		return nil
	}
	if maxID > through {
		next.rows, err = r.OutboxAfter(ctx, through, u.cfg.BatchRows)
	}
	return err
}

// declareDays adds the declarations of the candidate days that are due, as many as fit: a
// day whole, or in parts when it is larger than one batch (the first part here, the others
// kept for the batches after).
func (u *Uploader) declareDays(ctx context.Context, r *ledger.HQReader, next *draft, candidates []undeclaredDay,
	waiting waitingList) error {
	for _, c := range candidates {
		if waiting.has(c.date) {
			continue // its parts are on their way
		}
		// Due once no row of the date is left after the watermark; the manifest comes
		// from the same snapshot, so it lists exactly the rows HQ acknowledged.
		more, err := r.HasOutboxAfter(ctx, c.date, next.through)
		if err != nil {
			return err
		}
		if more {
			continue
		}
		txns, err := r.DayManifest(ctx, c.date)
		if err != nil {
			return err
		}
		d := hqwire.StoreDay{BusinessDate: c.date, Revision: c.revision + 1, ClosedAt: next.now.UTC(), Txns: txns}
		n, err := jsonSize(&d)
		if err != nil {
			return err
		}
		if n <= u.dayLimit {
			if !next.add(d, 0, n) {
				break
			}
			continue
		}
		// Too large for one batch: in parts, taken from this snapshot once.
		ps, err := splitParts(d, u.dayLimit)
		if err != nil {
			return err
		}
		if len(ps) > u.maxParts {
			u.log.Error("a day declaration would take more parts than HQ takes: the day is left undeclared "+
				"(HQ's reconcile shows it as no_store_day); its rows are sent", "business_date", d.BusinessDate,
				"bytes", n, "parts", len(ps), "limit", u.maxParts, "txns", len(d.Txns))
			next.tooLarge = append(next.tooLarge, d.BusinessDate)
			continue
		}
		u.log.Info("declaring a day in parts: it is larger than one batch", "business_date", d.BusinessDate,
			"revision", d.Revision, "txns", len(d.Txns), "bytes", n, "parts", len(ps))
		next.split = append(next.split, splitDay{parts: ps, covered: c.sentRows})
		size, err := jsonSize(&ps[0])
		if err != nil {
			return err
		}
		if !next.add(ps[0], c.sentRows, size) {
			break
		}
	}
	return nil
}

// addExceptions adds the exception changes after the last one HQ acknowledged, in change
// order, as many as the room they may take holds.
func (u *Uploader) addExceptions(ctx context.Context, r *ledger.HQReader, next *draft, maxID int64) error {
	changed, last, full, err := r.ExceptionsAfter(ctx, next.xThrough, hqwire.MaxBatchExceptions)
	if err != nil {
		return err
	}
	// While rows wait, the exceptions take at most half of the room the days leave:
	// a backlog of changes with long details (a manager resolving a day of oversells
	// at once, a day of parked events) filled every batch, and the sales behind it
	// waited for all of it to drain. Rows go in every batch, changes too.
	xLimit := u.budget
	if maxID > next.through {
		xLimit = next.used + (u.budget-next.used)/2
	}
	next.xFull = full
	for i := range changed {
		x := &changed[i]
		x.SKU = hqwire.EscapeSKU(x.SKU)
		x.Detail, x.Resolution = fitText(x.Detail), fitText(x.Resolution)
		js, err := json.Marshal(x)
		if err != nil {
			return err
		}
		if next.used+len(js)+1 > xLimit && (len(next.xs) > 0 || len(next.out.Days) > 0) {
			// The next batch takes the rest: every exception whose last change is up
			// to the cursor is in this one (they come in change order).
			if len(next.xs) > 0 {
				last = next.xs[len(next.xs)-1].Change
			}
			next.xFull = true
			break
		}
		next.used += len(js) + 1
		next.xs = append(next.xs, *x)
	}
	if len(next.xs) > 0 {
		next.xCursor = last
	}
	return nil
}

// seal makes the batch of next: its declarations and exception changes, and as many of
// the rows read as the room left takes, encoded once.
func (u *Uploader) seal(next *draft) (*batch, error) {
	out, rows, xs, used := &next.out, next.rows, next.xs, next.used
	b := &batch{id: out.ID, lastID: next.through, dates: map[string]int{}, days: map[string]int64{}, parts: next.parts,
		xThrough: next.xCursor}
	out.Exceptions = xs
	for _, d := range out.Days {
		if !d.InParts() {
			b.days[d.BusinessDate] = d.Revision
		}
	}
	// Each row is encoded once: its size decides whether it fits, and the body is put
	// together from the encodings.
	rowsJSON := bytes.NewBuffer(make([]byte, 0, 64<<10))
	rowsJSON.WriteByte('[')
	for i := range rows {
		js, err := json.Marshal(&rows[i].Row)
		if err != nil {
			return nil, fmt.Errorf("hq_outbox row %d: %w", rows[i].ID, err)
		}
		n := len(js) + 1
		if used+n > u.budget && (len(out.Rows) > 0 || len(out.Days) > 0 || len(xs) > 0) {
			break // the rest go in the next batch
		}
		if n > u.budget {
			u.log.Error("a row is larger than an HQ batch may be; sending it alone",
				"terminal", rows[i].Row.Terminal, "seq", rows[i].Row.Seq, "bytes", n)
		}
		used += n
		if len(out.Rows) > 0 {
			rowsJSON.WriteByte(',')
		}
		rowsJSON.Write(js)
		out.Rows = append(out.Rows, rows[i].Row)
		if b.firstID == 0 {
			b.firstID = rows[i].ID
		}
		b.lastID = rows[i].ID
		b.lastKey = uploadstate.RowKey(&rows[i])
		b.dates[rows[i].Row.BusinessDate]++
	}
	b.rows = len(out.Rows)
	if b.rows > 0 || len(xs) > 0 {
		u.firstSeen = time.Time{} // rows and changes left behind start waiting now
	}
	rowsJSON.WriteByte(']')
	var err error
	if b.body, err = encodeBatch(out, rowsJSON.Bytes()); err != nil {
		return nil, fmt.Errorf("encode batch %s: %w", out.ID, err)
	}
	b.contentHash = hqwire.ContentHash(b.body)
	return b, nil
}

// fitText makes an exception's text one HQ takes: without NUL characters (HQ refuses them:
// PostgreSQL text cannot hold one) and at most hqwire.MaxExceptionText bytes, cut at a
// character. A refused batch would hold back every row after it for one note.
func fitText(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= hqwire.MaxExceptionText {
		return s
	}
	const more = "…"
	cut := hqwire.MaxExceptionText - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// encodeBatch returns the JSON of b whose rows are already encoded as rowsJSON (a JSON
// array): b is encoded without its rows, and the array takes the place of "rows":null.
// The rows field comes first among the fields that can hold text, so the first
// occurrence is the field itself.
func encodeBatch(b *hqwire.Batch, rowsJSON []byte) ([]byte, error) {
	head := *b
	head.Rows = nil
	js, err := json.Marshal(&head)
	if err != nil {
		return nil, err
	}
	const null = `"rows":null`
	i := bytes.Index(js, []byte(null))
	if i < 0 {
		return nil, errors.New(`no "rows":null in the encoded batch`)
	}
	body := make([]byte, 0, len(js)+len(rowsJSON))
	body = append(body, js[:i+len(`"rows":`)]...)
	body = append(body, rowsJSON...)
	return append(body, js[i+len(null):]...), nil
}

func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b) + 1, err // and a comma
}

// batchID returns the id of the n-th batch of a store in a series: "S1-9f86d081-000000042"
// in series 9f86d081. HQ keys batches by store and id, so the store's name is there only
// for people reading logs: with a store id too long for it to fit in an id
// (wire.MaxIDLen), the id is "9f86d081-000000042".
func batchID(store, series string, n int64) string {
	if id := fmt.Sprintf("%s-%s-%09d", store, series, n); len(id) <= wire.MaxIDLen {
		return id
	}
	return fmt.Sprintf("%s-%09d", series, n)
}

// record stores a batch before it is first sent, and advances the batch counter.
func (u *Uploader) record(ctx context.Context, b *batch) error {
	dates, _ := json.Marshal(b.dates)
	days, _ := json.Marshal(b.days)
	parts, _ := json.Marshal(b.parts)
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO batches (batch_id, first_id, last_id, rows, dates, days, parts,
		last_key, exceptions_through, content_hash, body, state, created)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)`, b.id, b.firstID, b.lastID, b.rows, string(dates),
		string(days), string(parts), b.lastKey, b.xThrough, b.contentHash, b.body, u.stamp()); err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('next_batch', '1')
		ON CONFLICT (k) DO UPDATE SET v = CAST(v AS INTEGER) + 1`); err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	return nil
}

func (u *Uploader) stamp() string { return u.cfg.Now().UTC().Format(time.RFC3339Nano) }
