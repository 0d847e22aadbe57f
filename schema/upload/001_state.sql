-- hq-sync upload's own state, next to (never inside) the store's ledger. The uploader reads
-- the ledger's hq_outbox in id order; what it has recorded and sent lives here.

-- Small named values:
--   store_id            the store this state belongs to
--   batch_series        the random series this state numbers its batches in (below)
--   next_batch          the counter batch ids are made from within the series
--   batches_sent        how many batches HQ acknowledged to this state, across its series
--   sent_through        the highest hq_outbox id HQ has acknowledged (every row up to it is sent)
--   sent_key            terminal:seq:hash of that row, to recognise the same ledger on restart
--   exceptions_through  the last exception change number HQ acknowledged (every exception
--                       changed up to it is at HQ in its state since)
CREATE TABLE kv (
    k            TEXT    PRIMARY KEY,
    v            TEXT    NOT NULL
) WITHOUT ROWID;

-- Each state numbers its batches in a random series of its own: batch ids are
-- {store}-{batch_series}-{next_batch}, e.g. S1-9f86d081-000000042. A state lost and started
-- again (the ledger intact) would otherwise count from 1 again and name other content with
-- ids HQ already holds, and HQ would refuse every batch as batch_id_reused. A state that
-- finds its ids taken all the same (restored from a backup) starts a new series.
INSERT INTO kv (k, v) VALUES ('batch_series', lower(hex(randomblob(4))));

-- Every batch the uploader built. A batch is recorded here, with the exact request body,
-- before it is first sent, so that after any crash the same rows go again under the same id
-- and the same id never names other rows. Its rows are the hq_outbox rows with
-- previous sent_through < id <= last_id. body is dropped once HQ acknowledged the batch, and
-- a sent batch is kept for a week (markSent deletes older ones): a store that trades all day
-- sends a batch every few seconds.
CREATE TABLE batches (
    batch_id           TEXT    PRIMARY KEY,
    first_id           INTEGER NOT NULL,              -- first hq_outbox id in the batch (0: none)
    last_id            INTEGER NOT NULL,              -- last hq_outbox id covered (the watermark after it)
    rows               INTEGER NOT NULL,
    dates              TEXT    NOT NULL,              -- JSON: business date -> rows of that date
    days               TEXT    NOT NULL,              -- JSON: business date -> revision declared whole
    -- JSON: business date -> {"revision", "part", "parts", "covered"}, the part of a
    -- declaration in parts the batch carries (its day is not among days)
    parts              TEXT    NOT NULL DEFAULT '{}',
    last_key           TEXT    NOT NULL DEFAULT '',   -- terminal:seq:hash of the row at last_id
    -- the exception change its receipt moves kv exceptions_through to (0: it carries none)
    exceptions_through INTEGER NOT NULL DEFAULT 0,
    content_hash       TEXT    NOT NULL,
    body               BLOB,
    state              TEXT    NOT NULL CHECK (state IN ('pending', 'sent')),
    attempts           INTEGER NOT NULL DEFAULT 0,
    last_error         TEXT    NOT NULL DEFAULT '',
    created            TEXT    NOT NULL,
    sent_at            TEXT,
    receipt            TEXT
);
-- Batches go one at a time, in order: at most one is pending.
CREATE UNIQUE INDEX batches_one_pending ON batches (state) WHERE state = 'pending';
-- The time of the last batch sent (--status, every metrics scrape) and the week's deletion.
CREATE INDEX batches_sent ON batches (sent_at) WHERE state = 'sent';

-- Per business date: rows HQ has acknowledged, and the store's declarations of the day.
-- A day is declared (again) when it is over and sent_rows > declared_rows.
--
-- A day whose declaration would take more parts than HQ takes (hqwire.MaxDayParts) cannot be
-- declared: it is left undeclared (HQ's reconcile shows it as no_store_day) instead of
-- blocking every later batch behind one HQ must refuse. skipped_rows is sent_rows when that
-- was last found; a late row of the day (sent_rows grows) makes it due again.
CREATE TABLE days (
    business_date TEXT    PRIMARY KEY,
    sent_rows     INTEGER NOT NULL DEFAULT 0,
    declared_rows INTEGER NOT NULL DEFAULT 0,   -- sent_rows when the last declaration was acked
    revision      INTEGER NOT NULL DEFAULT 0,   -- last revision HQ acknowledged (0: none)
    declared_at   TEXT,
    skipped_rows  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- A declaration larger than one batch may carry goes in parts (hqwire.StoreDay Part/Parts). When
-- such a day is due, its list is taken from the ledger once and split, and the parts wait
-- here, so that every part comes from the same snapshot; each batch takes the next part of
-- the day, and a part leaves once HQ acknowledged it. Each split of a day has an id of its
-- own (hqwire.StoreDay Split), sent with every part: HQ adds a part only to the parts of its
-- split. covered_rows is the day's sent_rows when the list was taken: the last part's
-- receipt makes it declared_rows, so a late row sent while the parts go is declared by the
-- next revision.
CREATE TABLE day_parts (
    business_date TEXT    NOT NULL,
    part          INTEGER NOT NULL,
    parts         INTEGER NOT NULL,
    revision      INTEGER NOT NULL,
    covered_rows  INTEGER NOT NULL,
    closed_at     TEXT    NOT NULL,
    split         TEXT    NOT NULL,
    txns          BLOB    NOT NULL, -- the part's transactions, the JSON of a []hqwire.Txn
    PRIMARY KEY (business_date, part)
) WITHOUT ROWID;
