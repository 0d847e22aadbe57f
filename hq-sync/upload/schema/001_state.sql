-- hq-sync upload's own state, next to (never inside) the store's ledger. The uploader reads
-- the ledger's hq_outbox in id order; what it has recorded and sent lives here.

-- Small named values:
--   store_id      the store this state belongs to
--   next_batch    the counter batch ids are made from (S1-000000042)
--   sent_through  the highest hq_outbox id HQ has acknowledged (every row up to it is sent)
--   sent_key      terminal:seq:hash of that row, to recognise the same ledger on restart
CREATE TABLE kv (
    k            TEXT    PRIMARY KEY,
    v            TEXT    NOT NULL
) WITHOUT ROWID;

-- Every batch the uploader built. A batch is recorded here, with the exact request body,
-- before it is first sent, so that after any crash the same rows go again under the same id
-- and the same id never names other rows. Its rows are the hq_outbox rows with
-- previous sent_through < id <= last_id. body is dropped once HQ acknowledged the batch.
CREATE TABLE batches (
    batch_id     TEXT    PRIMARY KEY,
    first_id     INTEGER NOT NULL,              -- first hq_outbox id in the batch (0: none)
    last_id      INTEGER NOT NULL,              -- last hq_outbox id covered (the watermark after it)
    rows         INTEGER NOT NULL,
    dates        TEXT    NOT NULL,              -- JSON: business date -> rows of that date
    days         TEXT    NOT NULL,              -- JSON: business date -> revision declared
    last_key     TEXT    NOT NULL DEFAULT '',   -- terminal:seq:hash of the row at last_id
    content_hash TEXT    NOT NULL,
    body         BLOB,
    state        TEXT    NOT NULL CHECK (state IN ('pending', 'sent')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT    NOT NULL DEFAULT '',
    created      TEXT    NOT NULL,
    sent_at      TEXT,
    receipt      TEXT
);
-- Batches go one at a time, in order: at most one is pending.
CREATE UNIQUE INDEX batches_one_pending ON batches (state) WHERE state = 'pending';

-- Per business date: rows HQ has acknowledged, and the store's declarations of the day.
-- A day is declared (again) when it is over and sent_rows > declared_rows.
CREATE TABLE days (
    business_date TEXT    PRIMARY KEY,
    sent_rows     INTEGER NOT NULL DEFAULT 0,
    declared_rows INTEGER NOT NULL DEFAULT 0,   -- sent_rows when the last declaration was acked
    revision      INTEGER NOT NULL DEFAULT 0,   -- last revision HQ acknowledged (0: none)
    declared_at   TEXT
) WITHOUT ROWID;
