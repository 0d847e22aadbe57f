-- The store ledger: the final judge of what the store sold. Written by one goroutine (the
-- ingest's committer); Redis holds only projections of it. Money columns are integer fen,
-- times are RFC 3339 with nanoseconds in UTC, business dates are YYYY-MM-DD in the store's
-- time zone and are taken from the event's own time, never the sync time.
--
-- The store's terminals sell at once, so a group commit holds events of many terminals.
-- Every b-tree keyed by (terminal, seq) takes such a group at as many places as it has
-- terminals: one page written to the write-ahead log per terminal, per b-tree, per commit.
-- The rows every sale writes besides its event (its sale, lines and payments, its outbox
-- row) are keyed otherwise, or not at all, and go in commit order at the end of their
-- tables; each is unique through its event.

-- Small named values: store_id (the store this ledger belongs to); backup_ms (the mark a
-- backup's copy carries: when it was made); restored_ms (when a ledger carrying that mark
-- was first opened, which then takes the mark away).
CREATE TABLE meta (
    k            TEXT    PRIMARY KEY,
    v            TEXT    NOT NULL
);

-- Every event the store decided, one row per idempotency key (terminal, seq). A row with
-- final = 0 is a live refusal (out of stock, rate limited) that an offline resend of the same
-- key replaces; an accepted row is always final.
CREATE TABLE events (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq > 0),
    kind          TEXT    NOT NULL,
    hash          TEXT    NOT NULL,
    at            TEXT    NOT NULL,              -- business time ('' if it could not be read)
    business_date TEXT    NOT NULL,              -- from at ('' if at could not be read)
    offline       INTEGER NOT NULL DEFAULT 0,
    status        TEXT    NOT NULL CHECK (status IN ('accepted', 'rejected', 'conflict', 'rate_limited')),
    final         INTEGER NOT NULL CHECK (final IN (0, 1)),
    code          TEXT    NOT NULL DEFAULT '',
    message       TEXT    NOT NULL DEFAULT '',
    flow_no       INTEGER,                       -- accepted sales and refunds
    oversold      INTEGER NOT NULL DEFAULT 0,
    received_ms   INTEGER NOT NULL,
    payload       BLOB    NOT NULL,              -- the payload bytes as received
    PRIMARY KEY (terminal, seq),
    CHECK (status <> 'accepted' OR final = 1)
);

-- Store flow numbers, one sequence per business date shared by sales and refunds: each
-- accepted sale and refund carries its flow number in its events row, and this index is
-- what makes a flow number never repeat (invariant 8).
CREATE UNIQUE INDEX events_flow ON events (business_date, flow_no) WHERE flow_no IS NOT NULL;

-- Each terminal's last heartbeat (its reported backlog, for the manager's view and the
-- metrics) in one seek, whatever came after it. Only accepted heartbeats enter the index
-- (one a minute per terminal): sales never touch it.
CREATE INDEX events_heartbeats ON events (terminal, seq) WHERE kind = 'heartbeat' AND status = 'accepted';

-- Accepted sales, keyed by their store flow number, which the store hands out in commit
-- order. A sale's (terminal, seq) is unique through its event; the readers join sales,
-- payments and the HQ outbox by (business_date, flow_no). Nothing looks a sale up by its
-- sale id.
CREATE TABLE sales (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    sale_id       TEXT    NOT NULL,
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL,
    total         INTEGER NOT NULL CHECK (total >= 0),
    change        INTEGER NOT NULL CHECK (change >= 0),
    offline       INTEGER NOT NULL,
    oversold      INTEGER NOT NULL,
    PRIMARY KEY (business_date, flow_no)
) WITHOUT ROWID;

-- Lines of accepted sales; n is the position in the payload (line numbers are the
-- terminal's). No key: lines are only read with their sale's other rows, and a sale's lines
-- are written once, with its event, whose key is unique.
CREATE TABLE sale_lines (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    n             INTEGER NOT NULL,
    line          INTEGER NOT NULL,
    sku           TEXT    NOT NULL,
    name          TEXT    NOT NULL DEFAULT '',
    qty           INTEGER NOT NULL CHECK (qty > 0),
    unit_price    INTEGER NOT NULL CHECK (unit_price >= 0),
    amount        INTEGER NOT NULL
);

-- Tenders of accepted sales, as paid (cash before change; the sale row holds the change),
-- keyed by their sale's flow number.
CREATE TABLE payments (
    business_date TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL,
    n             INTEGER NOT NULL,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    method        TEXT    NOT NULL CHECK (method IN ('cash', 'card', 'qr')),
    amount        INTEGER NOT NULL CHECK (amount > 0),
    reference     TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (business_date, flow_no, n)
) WITHOUT ROWID;

-- Accepted refunds. refunds_sale answers, for the sales a commit accepts, which of them the
-- ledger holds refunds of.
CREATE TABLE refunds (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    refund_id     TEXT    NOT NULL,
    sale_id       TEXT    NOT NULL,
    sale_seq      INTEGER NOT NULL,
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL,
    amount        INTEGER NOT NULL CHECK (amount > 0),
    method        TEXT    NOT NULL CHECK (method IN ('cash', 'card', 'qr')),
    reference     TEXT    NOT NULL DEFAULT '',
    restock       INTEGER NOT NULL,
    PRIMARY KEY (terminal, seq),
    UNIQUE (business_date, flow_no)
);
CREATE INDEX refunds_sale ON refunds (terminal, sale_seq);

CREATE TABLE refund_lines (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    n             INTEGER NOT NULL,
    line          INTEGER NOT NULL,
    sku           TEXT    NOT NULL,
    qty           INTEGER NOT NULL CHECK (qty > 0),
    amount        INTEGER NOT NULL CHECK (amount >= 0),
    PRIMARY KEY (terminal, seq, n)
) WITHOUT ROWID;

-- Current stock per SKU. It always equals Σ stock_flow.delta of the SKU (invariant 4); it
-- may be negative after offline oversells (invariant 5).
CREATE TABLE stock (
    sku           TEXT    PRIMARY KEY,
    qty           INTEGER NOT NULL
) WITHOUT ROWID;

-- Every change of stock but a sale's: opening stock, adjustments, restocking refunds. A
-- sale's movement is its lines (no row here has reason 'sale').
CREATE TABLE stock_moves (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    sku           TEXT    NOT NULL,
    delta         INTEGER NOT NULL,
    reason        TEXT    NOT NULL CHECK (reason IN ('opening', 'adjust', 'sale', 'refund', 'archived')),
    ref           TEXT    NOT NULL,              -- adjustment id, terminal:seq of the event, or archive:YYYY-MM
    -- 'archived': the lines of the sales of a month's days moved to its archive (Archive),
    -- summed per SKU, so that stock stays provable from the ledger alone
    at            TEXT    NOT NULL
);

-- Every movement of stock, from which stock is provable: stock = Σ stock_flow.delta per SKU.
CREATE VIEW stock_flow (sku, delta, reason, ref, at) AS
    SELECT sku, delta, reason, ref, at FROM stock_moves
    UNION ALL
    SELECT l.sku, -l.qty, 'sale', l.terminal || ':' || l.seq, e.at
    FROM sale_lines l LEFT JOIN events e ON e.terminal = l.terminal AND e.seq = l.seq;

-- Manager stock adjustments and opening stock, idempotent by the caller's id. A shelf count
-- (Ledger.Count) books the difference between what was counted and the ledger's quantity
-- at the moment it is booked: a retried count must answer with the first booking and the
-- same id reused for another count must be refused, but the delta alone cannot tell a retry
-- from another count (the ledger's quantity may have moved in between), so the adjustment
-- keeps what was counted. counted is NULL for an adjustment by a given delta and for
-- opening stock.
CREATE TABLE adjustments (
    id            TEXT    PRIMARY KEY,
    sku           TEXT    NOT NULL,
    delta         INTEGER NOT NULL,
    reason        TEXT    NOT NULL CHECK (reason IN ('opening', 'adjust')),
    at            TEXT    NOT NULL,
    counted       INTEGER CHECK (counted >= 0)
);

-- Sales that took a SKU below zero: qty_short units of the sale were not in stock. A manager
-- resolves the exception once the shortfall is explained (the shelf counted and the stock
-- adjusted, goods found in the back room): when, and what was found. The exception stays;
-- resolved ones leave the open list.
CREATE TABLE oversells (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    sku           TEXT    NOT NULL,
    qty_short     INTEGER NOT NULL CHECK (qty_short > 0),
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    resolved_at   TEXT    NOT NULL DEFAULT '',
    resolution    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (terminal, seq, sku)
);
CREATE INDEX oversells_date ON oversells (business_date);

-- A refund reaches the ledger after the gate has applied it (counters, restock, flow number),
-- and an offline one after the money left the till: the ledger cannot refuse it. It records
-- it, and flags it here when its own records do not cover it (the sale it names is not the
-- sale accepted at that seq, or with the store's earlier refunds of that sale it returns a
-- line, a SKU, a quantity or an amount the sale did not have), as an oversell is flagged:
-- for a manager to explain. One row per refund, the first problem found; the refund's own
-- rows stand as received.
--
-- An exception opened again on another problem carries the resolution it had before, for
-- as long as the problem stays of that code, in column earlier: found back by its text in
-- the detail, it could be found inside the problem's own text (a SKU or a sale id may hold
-- any text), and the detail is written afresh by every later refund of the sale. A reader
-- shows detail || earlier.
CREATE TABLE refund_exceptions (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,              -- the refund's event
    code          TEXT    NOT NULL,              -- refund_sale_unknown, refund_exceeds_sale
    detail        TEXT    NOT NULL,
    at            TEXT    NOT NULL,              -- the refund's business time
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    resolved_at   TEXT    NOT NULL DEFAULT '',
    resolution    TEXT    NOT NULL DEFAULT '',
    earlier       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (terminal, seq)
);
CREATE INDEX refund_exceptions_date ON refund_exceptions (business_date);

-- Offline sales that charged, for a SKU, another unit price than the store's catalog held
-- when the ledger recorded them (one row per sale and SKU). The customer paid what the till
-- asked and the sale stands (invariant 5); the difference is for a manager to explain: code
-- price_changed when the till priced from an older catalog version than the store's (the
-- price changed while it was offline), price_mismatch when it names the store's version or
-- none (a price the store never set at that version). qty counts the units of the SKU sold at
-- another price, sold_price is the first such line's unit price, difference is Σ (catalog −
-- sold) × qty over them in fen (positive: the till charged less).
CREATE TABLE price_exceptions (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    sku           TEXT    NOT NULL,
    code          TEXT    NOT NULL,
    qty           INTEGER NOT NULL CHECK (qty > 0),
    sold_price    INTEGER NOT NULL,
    catalog_price INTEGER NOT NULL,
    difference    INTEGER NOT NULL,
    sale_version  INTEGER NOT NULL,   -- the catalog version the sale names
    store_version INTEGER NOT NULL,   -- the store's catalog version it was held to
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    resolved_at   TEXT    NOT NULL DEFAULT '',
    resolution    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (terminal, seq, sku)
);
CREATE INDEX price_exceptions_date ON price_exceptions (business_date);

-- Events refused for good (final rejected or conflict). The till kept its sale or refund,
-- and counts it in its day close; the ledger does not. A parked event is an exception like
-- an oversell: the manager resolves it with what explained it, and every change goes to
-- HQ (exception_changes), where the reconciliation lists it beside the difference in the
-- day's totals it explains.
--
-- A key can be parked with more than one content: the till keeps every content it was
-- answered conflict for (its day close counts each), and a key reused twice over (a till
-- restored from a backup, then again; three devices with one terminal id) has a third
-- content and more. Each distinct content (by its hash) is kept once; a redelivery of any
-- of them changes nothing. id numbers the parked contents.
--
-- sku is the parked content's identity at HQ (the sku of its hqwire.Exception, whose key is
-- kind, terminal, seq and sku): '' for the first content parked under a key, and the
-- content's hash for each later one.
--
-- business_date is the event's business date, or, for an event whose time could not be
-- read, the store's business date when it was parked.
CREATE TABLE parked (
    id            INTEGER PRIMARY KEY,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    hash          TEXT    NOT NULL,
    sku           TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    code          TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    at            TEXT    NOT NULL,
    parked_ms     INTEGER NOT NULL,
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    resolved_at   TEXT    NOT NULL DEFAULT '',
    resolution    TEXT    NOT NULL DEFAULT '',
    UNIQUE (terminal, seq, hash),
    UNIQUE (terminal, seq, sku)
);
CREATE INDEX parked_recent ON parked (parked_ms);

-- Each terminal's declared totals for a business day (the date the payload names). A later
-- close of the same day by the same terminal (higher seq) replaces an earlier one.
CREATE TABLE day_closes (
    terminal      TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    payload       BLOB    NOT NULL,
    PRIMARY KEY (terminal, business_date)
);

-- What hq-sync upload owes headquarters: one row per accepted sale, refund and day close, in
-- commit order. business_date is the event's (for a day close: the day it closes). The
-- uploader reads the event's business time, content hash and payload from its events row,
-- by (terminal, seq), and keeps what it has sent in its own state database. Ids are never
-- reused. The outbox is read by id, and a row is written once, with its event: no
-- (terminal, seq) key.
CREATE TABLE hq_outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    kind          TEXT    NOT NULL CHECK (kind IN ('sale', 'refund', 'day_close')),
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    business_date TEXT    NOT NULL,
    flow_no       INTEGER
);
-- The uploader declares a business date closed only when no row of that date is left after
-- its upload watermark: this index answers "is there a row of date D with id > W?" with one
-- seek instead of a scan of the unsent tail.
CREATE INDEX hq_outbox_date ON hq_outbox (business_date, id);

-- The manager's live limits and promo. The ledger keeps them, and every rebuild gives them
-- to Redis, which loses them with its data (restarted empty, or a replica promoted before
-- it had them); the degraded-mode limiter holds to them too. One row; no row: never set
-- (the defaults).
CREATE TABLE live_limits (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    window_ms      INTEGER NOT NULL CHECK (window_ms >= 0), -- 0: the default
    store          INTEGER NOT NULL CHECK (store >= 0),
    terminal       INTEGER NOT NULL CHECK (terminal >= 0),
    scan           INTEGER NOT NULL CHECK (scan >= 0),
    pay            INTEGER NOT NULL CHECK (pay >= 0),
    refund         INTEGER NOT NULL CHECK (refund >= 0),
    promo_percent  INTEGER NOT NULL DEFAULT 100 CHECK (promo_percent > 0),
    promo_until_ms INTEGER NOT NULL DEFAULT 0,  -- Unix ms when the promo ends by itself
    set_at         TEXT    NOT NULL
);

-- Gaps in a terminal's seq order that the store took: the events from_seq..to_seq of the
-- terminal were sent to (and acked by) a ledger this one is not (restored from a backup, or
-- started empty), the store asked the till for them again (a resend), and the till no longer
-- held them: its next event, to_seq + 1, said so and was accepted without them. reason is
-- 'pruned'. The events are at HQ if the uploader of the lost ledger sent them, but not here.
-- at_ms is when the store accepted the event after the gap. Any other event beyond the
-- store's next is answered out_of_order and the till asked for what the ledger lacks.
CREATE TABLE seq_gaps (
    terminal      TEXT    NOT NULL,
    from_seq      INTEGER NOT NULL CHECK (from_seq > 0),
    to_seq        INTEGER NOT NULL CHECK (to_seq >= from_seq),
    at_ms         INTEGER NOT NULL,
    reason        TEXT    NOT NULL CHECK (reason IN ('pruned')),
    PRIMARY KEY (terminal, from_seq)
);

-- Every change of an exception the ledger flags for a manager (an oversell line, a refund
-- exception, a parked content, a seq gap), in order, so that hq-sync upload can send
-- headquarters each exception's state after it changes: flagged, resolved, reopened or
-- withdrawn (deleted: a refund its sale, arrived late, now covers). Triggers keep it, so no
-- writer can forget a change; they fire only when an exception changes, which no ordinary
-- sale does. The uploader reads the changes after the last one HQ acknowledged, and for
-- each exception they name the state the exception tables hold now (or that it is gone).
--
-- id is the change number: one above the one before, and never below the time of the
-- change in microseconds since 1970. A ledger restored from a backup thus numbers its next
-- changes above those made since the backup (which the uploader may have sent, and HQ
-- keeps the state with the highest number), unless its clock is behind the clock of those
-- changes. Rows are never deleted: numbers only grow, and are never reused.
CREATE TABLE exception_changes (
    id            INTEGER PRIMARY KEY,
    kind          TEXT    NOT NULL, -- oversell, price, refund, parked or seq_gap
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL, -- seq_gap: from_seq
    sku           TEXT    NOT NULL, -- oversell, price: the SKU; parked: the content's sku; else ''
    business_date TEXT    NOT NULL  -- what the exception is filed under, also once withdrawn
);

CREATE TRIGGER oversells_flagged AFTER INSERT ON oversells BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'oversell', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER oversells_changed AFTER UPDATE ON oversells BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'oversell', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER oversells_withdrawn AFTER DELETE ON oversells BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'oversell', OLD.terminal, OLD.seq, OLD.sku, OLD.business_date);
END;

CREATE TRIGGER price_exceptions_flagged AFTER INSERT ON price_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'price', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER price_exceptions_changed AFTER UPDATE ON price_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'price', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER price_exceptions_withdrawn AFTER DELETE ON price_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'price', OLD.terminal, OLD.seq, OLD.sku, OLD.business_date);
END;

CREATE TRIGGER refund_exceptions_flagged AFTER INSERT ON refund_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'refund', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER refund_exceptions_changed AFTER UPDATE ON refund_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'refund', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER refund_exceptions_withdrawn AFTER DELETE ON refund_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'refund', OLD.terminal, OLD.seq, '', OLD.business_date);
END;

-- Each change of a parked content (its sku) goes to HQ; its key and hash never change.
CREATE TRIGGER parked_flagged AFTER INSERT ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER parked_changed AFTER UPDATE OF kind, code, message, payload, at, business_date, resolved,
        resolved_at, resolution ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER parked_withdrawn AFTER DELETE ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', OLD.terminal, OLD.seq, OLD.sku, OLD.business_date);
END;

-- A seq gap is an exception HQ hears of: the till's day close counts the events of the gap,
-- the store's rows do not. Each gap recorded is one change of an exception of kind
-- 'seq_gap', keyed by its terminal and first seq (from_seq; sku ''). No manager resolves a
-- gap, and the store never deletes one: a gap has the one change of its recording.
--
-- business_date is the business date of the event after the gap (to_seq + 1), as the
-- ledger filed it: the lost events came before it, and it is the day a till offline at
-- the restore made them rather than the day the store heard of it. The uploader reads it
-- again with the gap (ledger.HQReader), and files a gap whose event has no date under the
-- store's date when the gap was recorded (at_ms); this one, in UTC, is a placeholder.
CREATE TRIGGER seq_gap_recorded AFTER INSERT ON seq_gaps BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'seq_gap', NEW.terminal, NEW.from_seq, '',
        coalesce((SELECT nullif(e.business_date, '') FROM events e WHERE e.terminal = NEW.terminal
            AND e.seq = NEW.to_seq + 1), date(NEW.at_ms / 1000, 'unixepoch')));
END;

-- The business days whose keys the store let go from Redis (counters, counter index, flow
-- counter): HQ had acknowledged the day, so Redis need not hold it any more, and a year of
-- days does not pile up there. A rebuild leaves such a day out, and an event of it that
-- arrives later (a till offline past it) takes its flow number from the ledger (the day's
-- highest + 1, also above an archived day's), whatever the gate gave: the day's flow
-- counter in Redis is gone or short. touched counts such events: the keys the gate made
-- again for them are let go once more, and touched set back to 0 if no event came meanwhile.
CREATE TABLE redis_days (
    business_date TEXT    PRIMARY KEY,
    expired_ms    INTEGER NOT NULL,
    touched       INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The business days moved to a month's archive (Archive: <data-dir>/archive/ledger-YYYY-MM.db,
-- the same tables, checked before the days leave the ledger). Their events, sales, refunds,
-- day closes and acknowledged HQ rows are there, not here; max_flow keeps the day's flow
-- numbers unique if an event of it arrives after all (its flow number is above it).
CREATE TABLE archived_days (
    business_date TEXT    PRIMARY KEY,
    file          TEXT    NOT NULL, -- the archive's file name, in the archive directory
    events        INTEGER NOT NULL, -- events of the day moved
    max_flow      INTEGER NOT NULL,
    archived_ms   INTEGER NOT NULL
) WITHOUT ROWID;

-- Each terminal's highest seq whose event moved to an archive. An event of the terminal at
-- or below it that the ledger does not hold is looked for in the archives before it is
-- decided: a delivery of an archived event again is its duplicate (or a conflict), never a
-- new sale.
CREATE TABLE archived_seqs (
    terminal      TEXT    PRIMARY KEY,
    max_seq       INTEGER NOT NULL
) WITHOUT ROWID;
