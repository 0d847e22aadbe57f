-- HQ's database (SQLite engine, hq-sync serve): what every store uploaded.
--
-- A batch id is unique per store and remembers its content hash and the receipt answered
-- the first time, so that a replay gets the same receipt and a reuse with other content is
-- refused. A row (a sale, a refund or a terminal's day close) is unique per
-- (store, terminal, seq) across all batches. Sales and refunds are kept as figures and
-- content hash; their payloads stay in the store ledger (the hash proves them), a day
-- close keeps its payload, the terminal's own totals. A store's declaration of a business
-- day keeps only its highest revision; its transactions live in day_txns.
--
-- Money is integer fen. Times HQ records itself are Unix milliseconds (*_ms); times a
-- store sent (at, closed_at) are kept as the RFC 3339 text it sent, to the nanosecond.

CREATE TABLE batches (
    store        TEXT    NOT NULL,
    batch_id     TEXT    NOT NULL,
    content_hash TEXT    NOT NULL, -- hex SHA-256 of the request body (hq.ContentHash)
    receipt      TEXT    NOT NULL, -- the hq.Receipt JSON answered the first time
    stored_ms    INTEGER NOT NULL,
    PRIMARY KEY (store, batch_id)
) WITHOUT ROWID;

CREATE TABLE rows (
    business_date TEXT    NOT NULL, -- YYYY-MM-DD, the sale's date in the store's time zone
    store         TEXT    NOT NULL,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL, -- sale, refund or day_close
    flow_no       INTEGER NOT NULL,
    at            TEXT    NOT NULL,
    hash          TEXT    NOT NULL, -- the event's content hash (internal/wire)
    amount        INTEGER NOT NULL, -- fen; 0 for a day close
    cash          INTEGER NOT NULL, -- fen per payment method (by_method)
    card          INTEGER NOT NULL,
    qr            INTEGER NOT NULL,
    methods       INTEGER NOT NULL, -- the methods by_method names: 1 cash | 2 card | 4 qr
    batch_id      TEXT    NOT NULL, -- the batch that brought the row first
    received_ms   INTEGER NOT NULL,
    payload       BLOB,             -- a day close's payload (the terminal's declared totals)
    -- Stored in the order reconciliation reads them: one date, store by store.
    PRIMARY KEY (business_date, store, terminal, seq)
) WITHOUT ROWID;

-- A row's identity at HQ, whatever its date.
CREATE UNIQUE INDEX rows_key ON rows (store, terminal, seq);

CREATE TABLE days (
    store         TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    revision      INTEGER NOT NULL, -- the highest revision received
    closed_at     TEXT    NOT NULL,
    batch_id      TEXT    NOT NULL, -- the batch that brought this revision
    received_ms   INTEGER NOT NULL, -- when this revision arrived
    first_ms      INTEGER NOT NULL, -- when the first declaration of the day arrived
    PRIMARY KEY (store, business_date)
) WITHOUT ROWID;

CREATE INDEX days_by_date ON days (business_date, store);

-- The transactions of each day's current revision, in the order the store listed them.
CREATE TABLE day_txns (
    business_date TEXT    NOT NULL,
    store         TEXT    NOT NULL,
    i             INTEGER NOT NULL,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL,
    amount        INTEGER NOT NULL,
    cash          INTEGER NOT NULL,
    card          INTEGER NOT NULL,
    qr            INTEGER NOT NULL,
    methods       INTEGER NOT NULL,
    PRIMARY KEY (business_date, store, i)
) WITHOUT ROWID;
