-- HQ's database (SQLite engine, hq-sync serve): what every store uploaded.
--
-- A batch id is unique per store and remembers its content hash and the receipt answered
-- the first time, so that a replay gets the same receipt and a reuse with other content is
-- refused. A row (a sale, a refund or a terminal's day close) is unique per
-- (store, terminal, seq) across all batches. Sales and refunds are kept as figures and
-- content hash; their payloads stay in the store ledger (the hash proves them), a day
-- close keeps its payload, the terminal's own totals. A store's declaration of a business
-- day keeps only its highest revision; its transactions live in day_txns. A declaration in
-- parts waits in day_drafts until its last part. The exceptions each store's ledger flagged
-- are kept in their latest state.
--
-- Money is integer fen. Times HQ records itself are Unix milliseconds (*_ms); times a
-- store sent (at, closed_at) are kept as the RFC 3339 text it sent, to the nanosecond.

CREATE TABLE batches (
    store        TEXT    NOT NULL,
    batch_id     TEXT    NOT NULL,
    content_hash TEXT    NOT NULL, -- hex SHA-256 of the request body (hqwire.ContentHash)
    receipt      TEXT    NOT NULL, -- the hqwire.Receipt JSON answered the first time
    stored_ms    INTEGER NOT NULL,
    PRIMARY KEY (store, batch_id)
) WITHOUT ROWID;

-- When HQ last stored a batch of each store (hqstore.Storage LastBatches, hq-sync serve's
-- posgate_hq_last_batch_timestamp_seconds): read from the database, not kept in the
-- process, so it is right after a restart and across serve processes sharing a database.
CREATE INDEX batches_by_time ON batches (store, stored_ms);

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

-- A store's declaration of a day in parts (hqwire.StoreDay.Part of Parts), for a day larger
-- than one batch may carry. HQ keeps the parts aside here, in order, until the last one
-- arrives; only then does the revision become the day's (days, day_txns), and its draft
-- is deleted. Reads of days never look here.
--
-- A store-day has at most one draft: part 1 of a revision replaces whatever was kept of the
-- day before, and a whole declaration (or a completed one) deletes a draft of its revision
-- or lower. A part is added only to the parts of its own split (hqwire.StoreDay Split), so two
-- splits of one revision (the store split the day again after HQ dropped a part) never mix.
CREATE TABLE day_drafts (
    store         TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    revision      INTEGER NOT NULL, -- the revision the parts declare
    parts         INTEGER NOT NULL, -- how many parts the revision has
    split         TEXT    NOT NULL, -- the split the parts belong to
    next_part     INTEGER NOT NULL, -- the only part that may follow (2 after part 1)
    txns          INTEGER NOT NULL, -- transactions kept so far: the next part's first i
    closed_at     TEXT    NOT NULL, -- as part 1 sent it
    batch_id      TEXT    NOT NULL, -- the batch that brought part 1
    -- When part 1 came. A day first declared in parts was first declared then: the store's
    -- list was taken before it, and a row that reaches HQ after it is late (reconcile), as
    -- after a whole first declaration.
    first_ms      INTEGER NOT NULL,
    PRIMARY KEY (store, business_date)
) WITHOUT ROWID;

-- The transactions of each draft's parts so far, numbered across its parts in the order the
-- store listed them; the same columns as day_txns, which they are copied into as they are.
CREATE TABLE draft_txns (
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

-- The exceptions each store's ledger flagged (hqwire.Exception): an oversell (a sale took a
-- SKU below zero; one per sale and SKU), a refund its records of the sale do not cover, an
-- event the store refused for good (parked), or events of a till the store's ledger lacks
-- (seq_gap). HQ keeps one row per (store, kind, terminal, seq, sku): the state with the
-- highest change number the store sent. A state with the same or a lower change number
-- changes nothing, so a resend or a state overtaken on its way never goes back in time.
-- A withdrawn exception (the ledger no longer holds it) is kept, withdrawn, so that an
-- older state arriving later cannot bring it back; reads leave it out.
--
-- Times a store sent (at, resolved_at) are kept as RFC 3339 text, '' when none.
CREATE TABLE exceptions (
    store         TEXT    NOT NULL,
    kind          TEXT    NOT NULL, -- oversell, price, refund, parked or seq_gap
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL, -- the sale's (oversell), the refund's, the parked event's or the gap's first
    -- oversell: the SKU taken below zero, price: the SKU sold at another price (hqwire.EscapeSKU); parked: '' for a key's first
    -- content, the content's hash for each later one; refund and seq_gap: ''
    sku           TEXT    NOT NULL,
    change        INTEGER NOT NULL, -- the store ledger's change number of this state
    business_date TEXT    NOT NULL,
    withdrawn     INTEGER NOT NULL, -- 1: the ledger no longer holds it; the fields below are empty
    code          TEXT    NOT NULL,
    detail        TEXT    NOT NULL,
    qty_short     INTEGER NOT NULL, -- oversell: units below zero; otherwise 0
    at            TEXT    NOT NULL,
    resolved      INTEGER NOT NULL, -- 1: the store's manager explained it
    resolved_at   TEXT    NOT NULL,
    resolution    TEXT    NOT NULL,
    batch_id      TEXT    NOT NULL, -- the batch that brought this state
    received_ms   INTEGER NOT NULL, -- when this state arrived
    PRIMARY KEY (store, kind, terminal, seq, sku)
) WITHOUT ROWID;

-- Reconciliation reads one business date (of all stores or of one), in key order.
CREATE INDEX exceptions_by_date ON exceptions (business_date, store, kind, terminal, seq, sku);

-- hq-sync reconcile --open reads the exceptions no store manager has resolved, of every
-- date, in date and key order. Withdrawn and resolved exceptions stay for good, so a scan
-- of them all would grow with the years; this index holds the open ones alone.
CREATE INDEX exceptions_open ON exceptions (business_date, store, kind, terminal, seq, sku)
    WHERE NOT withdrawn AND NOT resolved;

-- Each reconciliation of a business date that ran to its end (hq-sync reconcile), of every
-- store (store '') or of one.
CREATE TABLE reconcile_runs (
    business_date TEXT    NOT NULL,
    store         TEXT    NOT NULL, -- '' for every store
    finished_ms   INTEGER NOT NULL,
    ok            INTEGER NOT NULL, -- 1: the date reconciled exactly
    stores        INTEGER NOT NULL,
    hq_txns       INTEGER NOT NULL,
    differences   INTEGER NOT NULL, -- transaction, totals and missing-declaration entries
    PRIMARY KEY (business_date, store, finished_ms)
) WITHOUT ROWID;
