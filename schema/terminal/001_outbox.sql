-- The terminal-agent's durable state. Money columns are integer fen.

-- Every event the terminal owes its store, in seq order. AUTOINCREMENT keeps a seq from ever
-- being reused, also after acked rows are pruned.
CREATE TABLE events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT    NOT NULL,
    at           TEXT    NOT NULL,              -- business time, RFC 3339 with offset
    business_date TEXT   NOT NULL,              -- YYYY-MM-DD in the store's time zone
    payload      BLOB    NOT NULL,              -- the exact bytes published
    hash         TEXT    NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'acked', 'parked', 'refused')),
    offline      INTEGER NOT NULL DEFAULT 0,    -- 1 once the terminal decided it locally
    stored_fen   INTEGER NOT NULL DEFAULT 0,    -- card/QR fen this event holds while unsynced
    created_ms   INTEGER NOT NULL,
    done_ms      INTEGER,                       -- when it was acked, parked or refused
    attempts     INTEGER NOT NULL DEFAULT 0,
    ack_status   TEXT,
    code         TEXT,
    message      TEXT,
    flow_no      INTEGER,
    store_date   TEXT
);
CREATE INDEX events_pending ON events (seq) WHERE state = 'pending';
CREATE INDEX events_done ON events (done_ms) WHERE state IN ('acked', 'refused');

-- Sales as the cashier sees them. A sale's event is written when it completes.
CREATE TABLE sales (
    id           TEXT    PRIMARY KEY,
    state        TEXT    NOT NULL CHECK (state IN ('open', 'completed', 'cancelled')),
    opened_at    TEXT    NOT NULL,
    completed_at TEXT,
    business_date TEXT,
    total        INTEGER NOT NULL DEFAULT 0,
    change       INTEGER NOT NULL DEFAULT 0,
    seq          INTEGER,                       -- the sale event
    flow_no      INTEGER,                       -- the store's flow number, once acked
    next_line    INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX sales_seq ON sales (seq);
-- The business days a till has traded on, read by index: the open days a day close looks for
-- (outbox.Store.DayToClose) and GET /v1/status lists are found by seeking from one traded day
-- to the next, not by reading every sale the till ever made.
CREATE INDEX sales_day ON sales (business_date) WHERE state = 'completed';

CREATE TABLE sale_lines (
    sale_id      TEXT    NOT NULL REFERENCES sales (id),
    line         INTEGER NOT NULL,
    sku          TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    qty          INTEGER NOT NULL CHECK (qty > 0),
    unit_price   INTEGER NOT NULL CHECK (unit_price >= 0),
    amount       INTEGER NOT NULL,
    removed      INTEGER NOT NULL DEFAULT 0,
    refunded_qty INTEGER NOT NULL DEFAULT 0,
    scan_seq     INTEGER,
    catalog_version INTEGER NOT NULL DEFAULT 0,  -- the catalog the line was priced from
    PRIMARY KEY (sale_id, line)
);
CREATE INDEX sale_lines_scan ON sale_lines (scan_seq);

CREATE TABLE payments (
    sale_id      TEXT    NOT NULL REFERENCES sales (id),
    n            INTEGER NOT NULL,
    method       TEXT    NOT NULL CHECK (method IN ('cash', 'card', 'qr')),
    amount       INTEGER NOT NULL CHECK (amount > 0),
    reference    TEXT    NOT NULL DEFAULT '',
    voided       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sale_id, n)
);

CREATE TABLE refunds (
    id           TEXT    PRIMARY KEY,
    sale_id      TEXT    NOT NULL REFERENCES sales (id),
    seq          INTEGER NOT NULL,
    at           TEXT    NOT NULL,
    business_date TEXT   NOT NULL,
    amount       INTEGER NOT NULL CHECK (amount > 0),
    method       TEXT    NOT NULL,
    reference    TEXT    NOT NULL DEFAULT '',
    restock      INTEGER NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'done' CHECK (state IN ('done', 'refused')),
    flow_no      INTEGER,
    approved_by  TEXT    NOT NULL DEFAULT ''    -- the supervisor whose PIN was checked, if any
);
CREATE INDEX refunds_seq ON refunds (seq);
CREATE INDEX refunds_sale ON refunds (sale_id);
CREATE INDEX refunds_day ON refunds (business_date) WHERE state = 'done';

CREATE TABLE refund_lines (
    refund_id    TEXT    NOT NULL REFERENCES refunds (id),
    line         INTEGER NOT NULL,
    sku          TEXT    NOT NULL,
    qty          INTEGER NOT NULL CHECK (qty > 0),
    amount       INTEGER NOT NULL,
    PRIMARY KEY (refund_id, line)
);

CREATE TABLE day_closes (
    business_date TEXT   PRIMARY KEY,
    seq          INTEGER NOT NULL,
    payload      BLOB    NOT NULL
);

-- A supervisor's reopen of a business day closed at this till (outbox.Tx.DayReopen, e.g. a
-- close pressed by mistake at 15:00). The close it undoes moves here from day_closes with why
-- and when, so the till trades on the day again and the day's next close is a new day_close
-- event, with a higher seq, that the store keeps in place of this one. The close event itself
-- is not withdrawn: the store holds it until the new close supersedes it.
CREATE TABLE day_reopens (
    n             INTEGER PRIMARY KEY,
    business_date TEXT    NOT NULL,             -- YYYY-MM-DD in the store's time zone
    close_seq     INTEGER NOT NULL,             -- the day_close event reopened
    close_payload BLOB    NOT NULL,             -- the totals it declared
    reason        TEXT    NOT NULL CHECK (reason <> ''),
    supervisor    TEXT    NOT NULL,             -- the supervisor whose PIN was checked
    reopened_at   TEXT    NOT NULL              -- RFC 3339 with offset, by the device's clock
);
CREATE INDEX day_reopens_day ON day_reopens (business_date, n);

-- Client tokens (Idempotency-Key) of the POS app's state-changing requests. n is the order
-- the requests were recorded in, which the clock cannot disturb: a request's record is pruned
-- only once enough requests have been recorded after it (outbox.Store.Prune), as a device
-- clock that jumps forward makes a record a minute old look days old. n is an alias of the
-- rowid, so VACUUM keeps it. status 0 means the request's effect is committed but its answer
-- is not yet recorded.
CREATE TABLE requests (
    n            INTEGER PRIMARY KEY,
    token        TEXT    NOT NULL UNIQUE,
    fingerprint  TEXT    NOT NULL,
    status       INTEGER NOT NULL DEFAULT 0,
    body         BLOB,
    ref          TEXT    NOT NULL DEFAULT '',
    created_ms   INTEGER NOT NULL
);

-- The store's catalog as last received; prices offline.
CREATE TABLE catalog (
    sku          TEXT    PRIMARY KEY,
    barcode      TEXT    UNIQUE,
    name         TEXT    NOT NULL,
    price        INTEGER NOT NULL CHECK (price >= 0)
);

-- The store's settings as last received (wire.Settings: its supervisors' PIN hashes and the
-- refund rules), the highest version seen; the agent checks supervisors' PINs against them,
-- also offline.
CREATE TABLE settings (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    version      INTEGER NOT NULL,
    payload      BLOB    NOT NULL               -- the message as published
);

-- Wrong PINs typed for a supervisor since the last right one (outbox.Store.Approve). From
-- the 5th on, the supervisor is refused until locked_until_ms, a delay that doubles with
-- each further wrong PIN. Kept here so that a restart of the agent does not reset it.
CREATE TABLE supervisor_failures (
    name            TEXT    PRIMARY KEY,
    failures        INTEGER NOT NULL,
    locked_until_ms INTEGER NOT NULL DEFAULT 0
);

-- The store's public catalog key the terminal pinned (ed25519, 32 bytes): the key of the first
-- signed catalog it took, unless --store-key names one. A catalog not signed by it is
-- ignored and counted (kv catalogs_refused).
CREATE TABLE store_key (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    key          BLOB    NOT NULL,
    pinned_ms    INTEGER NOT NULL
);

-- Small named values: catalog_version, catalogs_refused, offline_since_ms, last_ack_ms.
CREATE TABLE kv (
    k            TEXT    PRIMARY KEY,
    v            INTEGER NOT NULL
);
