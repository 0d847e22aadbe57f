-- The store ledger: the final judge of what the store sold. Written by one goroutine (the
-- ingest's committer); Redis holds only projections of it. Money columns are integer fen,
-- times are RFC 3339 with nanoseconds in UTC, business dates are YYYY-MM-DD in the store's
-- time zone and are taken from the event's own time, never the sync time.

-- Small named values: store_id (the store this ledger belongs to).
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

-- Store flow numbers, one sequence per business date shared by sales and refunds: the
-- primary key is what makes a flow number never repeat (invariant 8).
CREATE TABLE flow_numbers (
    business_date TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL CHECK (flow_no > 0),
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('sale', 'refund')),
    PRIMARY KEY (business_date, flow_no)
) WITHOUT ROWID;

-- Accepted sales.
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
    PRIMARY KEY (terminal, seq),
    UNIQUE (business_date, flow_no)
);
CREATE INDEX sales_sale_id ON sales (terminal, sale_id);

-- Lines of accepted sales; n is the position in the payload (line numbers are the terminal's).
CREATE TABLE sale_lines (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    n             INTEGER NOT NULL,
    line          INTEGER NOT NULL,
    sku           TEXT    NOT NULL,
    name          TEXT    NOT NULL DEFAULT '',
    qty           INTEGER NOT NULL CHECK (qty > 0),
    unit_price    INTEGER NOT NULL CHECK (unit_price >= 0),
    amount        INTEGER NOT NULL,
    PRIMARY KEY (terminal, seq, n)
) WITHOUT ROWID;

-- Tenders of accepted sales, as paid (cash before change; the sale row holds the change).
CREATE TABLE payments (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    n             INTEGER NOT NULL,
    method        TEXT    NOT NULL CHECK (method IN ('cash', 'card', 'qr')),
    amount        INTEGER NOT NULL CHECK (amount > 0),
    reference     TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (terminal, seq, n)
) WITHOUT ROWID;

-- Accepted refunds.
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

-- Current stock per SKU. It always equals Σ stock_moves.delta of the SKU (invariant 4); it
-- may be negative after offline oversells (invariant 5).
CREATE TABLE stock (
    sku           TEXT    PRIMARY KEY,
    qty           INTEGER NOT NULL
) WITHOUT ROWID;

-- Every change of stock, from which stock is provable.
CREATE TABLE stock_moves (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    sku           TEXT    NOT NULL,
    delta         INTEGER NOT NULL,
    reason        TEXT    NOT NULL CHECK (reason IN ('opening', 'adjust', 'sale', 'refund')),
    ref           TEXT    NOT NULL,              -- adjustment id, or terminal:seq of the event
    at            TEXT    NOT NULL
);

-- Manager stock adjustments and opening stock, idempotent by the caller's id.
CREATE TABLE adjustments (
    id            TEXT    PRIMARY KEY,
    sku           TEXT    NOT NULL,
    delta         INTEGER NOT NULL,
    reason        TEXT    NOT NULL CHECK (reason IN ('opening', 'adjust')),
    at            TEXT    NOT NULL
);

-- Sales that took a SKU below zero: qty_short units of the sale were not in stock.
CREATE TABLE oversells (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    sku           TEXT    NOT NULL,
    qty_short     INTEGER NOT NULL CHECK (qty_short > 0),
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (terminal, seq, sku)
);
CREATE INDEX oversells_date ON oversells (business_date);

-- Events refused for good (final rejected or conflict), for the manager.
CREATE TABLE parked (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    code          TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    at            TEXT    NOT NULL,
    parked_ms     INTEGER NOT NULL,
    PRIMARY KEY (terminal, seq)
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
-- commit order. batch_id is set when the row is put in a batch, sent_ms when HQ acked it.
-- business_date is the event's (for a day close: the day it closes).
CREATE TABLE hq_outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    kind          TEXT    NOT NULL CHECK (kind IN ('sale', 'refund', 'day_close')),
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    business_date TEXT    NOT NULL,
    flow_no       INTEGER,
    at            TEXT    NOT NULL,
    hash          TEXT    NOT NULL,
    payload       BLOB    NOT NULL,              -- the payload bytes as received
    batch_id      TEXT,
    sent_ms       INTEGER,
    UNIQUE (terminal, seq)
);
CREATE INDEX hq_outbox_unsent ON hq_outbox (id) WHERE sent_ms IS NULL;
