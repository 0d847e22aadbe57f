-- HQ's database (PostgreSQL engine, hq-sync serve): the same tables and meaning as the
-- SQLite engine's schema/hq/001_hq.sql, for a chain: several serve processes share it, and
-- the two tables that grow with every sale (rows, day_txns) are partitioned by business
-- date, one partition per day.
--
-- A batch id is unique per store and remembers its content hash and the receipt answered
-- the first time. A row is unique per (store, terminal, seq) across all batches; sales and
-- refunds are kept as figures and content hash (their payloads stay in the store ledger),
-- a day close keeps its payload. A store's declaration of a business day keeps only its
-- highest revision; its transactions live in day_txns. A declaration in parts waits in
-- day_drafts until its last part. The exceptions each store's ledger flagged are kept in
-- their latest state.
--
-- Keys are COLLATE "C" so that every engine orders them byte-wise. Money is integer fen;
-- times HQ records itself are Unix milliseconds (*_ms); times a store sent (at, closed_at,
-- resolved_at) are kept as the RFC 3339 text it sent.
--
-- The partitions (rows_pYYYYMMDD, day_txns_pYYYYMMDD) are not made here: serve makes them
-- ahead of the days to come (--partitions-ahead), a batch makes one its rows need that is
-- missing (a late sale of an old day, a till's clock ahead), and serve --retain detaches
-- and drops those of the days reconcile has covered (reconcile_runs) once they are older
-- than the retention. A batch of one store is stored under that store's advisory lock
-- (hashtextextended('posgate-hq-store/' || store, 0)), so that two serve processes never
-- store batches of one store at once: the same batch sent to both is stored once, and a
-- row's key is looked for in other days' partitions without a race.

CREATE TABLE batches (
    store        text COLLATE "C" NOT NULL,
    batch_id     text COLLATE "C" NOT NULL,
    content_hash text   NOT NULL,
    receipt      text   NOT NULL, -- the hqwire.Receipt JSON answered the first time
    stored_ms    bigint NOT NULL,
    PRIMARY KEY (store, batch_id)
);

-- When HQ last stored a batch of each store (hqstore.Storage LastBatches, hq-sync serve's
-- posgate_hq_last_batch_timestamp_seconds): read from the database, not kept in the
-- process, so it is right after a restart and across serve processes sharing a database.
CREATE INDEX batches_by_time ON batches (store, stored_ms);

CREATE TABLE rows (
    store         text COLLATE "C" NOT NULL,
    terminal      text COLLATE "C" NOT NULL,
    seq           bigint NOT NULL,
    kind          text   NOT NULL, -- sale, refund or day_close
    business_date text COLLATE "C" NOT NULL, -- YYYY-MM-DD in the store's time zone
    flow_no       bigint NOT NULL,
    at            text   NOT NULL,
    hash          text   NOT NULL, -- the event's content hash (internal/wire)
    amount        bigint NOT NULL, -- fen; 0 for a day close
    cash          bigint NOT NULL, -- fen per payment method (by_method)
    card          bigint NOT NULL,
    qr            bigint NOT NULL,
    methods       bigint NOT NULL, -- the methods by_method names: 1 cash | 2 card | 4 qr
    batch_id      text   NOT NULL, -- the batch that brought the row first
    received_ms   bigint NOT NULL,
    payload       bytea,           -- a day close's payload (the terminal's declared totals)
    -- One day per partition: within it the key is (store, terminal, seq), which is also the
    -- order reconciliation reads a day in, store by store. A key is unique across days
    -- through terminal_seqs and the store's lock (above).
    PRIMARY KEY (store, terminal, seq, business_date)
) PARTITION BY RANGE (business_date);

-- The highest seq HQ holds of each terminal of each store. A store's rows come in seq order
-- per terminal (its ledger commits them so, and the uploader sends them in commit order): a
-- row above it is new, and only a row at or below it (a resend, or the same key with other
-- content) is looked for among the rows, first in its own day's partition and, when not
-- there, in every day's.
CREATE TABLE terminal_seqs (
    store         text COLLATE "C" NOT NULL,
    terminal      text COLLATE "C" NOT NULL,
    max_seq       bigint NOT NULL,
    PRIMARY KEY (store, terminal)
);

CREATE TABLE days (
    store         text COLLATE "C" NOT NULL,
    business_date text COLLATE "C" NOT NULL,
    revision      bigint NOT NULL, -- the highest revision received
    closed_at     text   NOT NULL,
    batch_id      text   NOT NULL, -- the batch that brought this revision
    received_ms   bigint NOT NULL, -- when this revision arrived
    first_ms      bigint NOT NULL, -- when the first declaration of the day arrived
    PRIMARY KEY (store, business_date)
);

CREATE INDEX days_by_date ON days (business_date, store);

-- The transactions of each day's current revision, in the order the store listed them,
-- partitioned by day as rows are.
CREATE TABLE day_txns (
    business_date text COLLATE "C" NOT NULL,
    store         text COLLATE "C" NOT NULL,
    i             integer NOT NULL,
    terminal      text COLLATE "C" NOT NULL,
    seq           bigint NOT NULL,
    kind          text   NOT NULL,
    flow_no       bigint NOT NULL,
    amount        bigint NOT NULL,
    cash          bigint NOT NULL,
    card          bigint NOT NULL,
    qr            bigint NOT NULL,
    methods       bigint NOT NULL,
    PRIMARY KEY (business_date, store, i)
) PARTITION BY RANGE (business_date);

-- A store's declaration of a day in parts (hqwire.StoreDay.Part of Parts), for a day larger
-- than one batch may carry. HQ keeps the parts aside here, in order, until the last one
-- arrives; only then does the revision become the day's (days, day_txns), and its draft
-- is deleted. Reads of days never look here.
--
-- A store-day has at most one draft: part 1 of a revision replaces whatever was kept of the
-- day before, and a whole declaration (or a completed one) deletes a draft of its revision
-- or lower. A part is added only to the parts of its own split (hqwire.StoreDay Split), so two
-- splits of one revision (the store split the day again after HQ dropped a part) never mix.
-- A transaction that writes a day's draft_txns first locks its day_drafts row.
CREATE TABLE day_drafts (
    store         text COLLATE "C" NOT NULL,
    business_date text COLLATE "C" NOT NULL,
    revision      bigint  NOT NULL, -- the revision the parts declare
    parts         integer NOT NULL, -- how many parts the revision has
    split         text COLLATE "C" NOT NULL, -- the split the parts belong to
    next_part     integer NOT NULL, -- the only part that may follow (2 after part 1)
    txns          integer NOT NULL, -- transactions kept so far: the next part's first i
    closed_at     text    NOT NULL, -- as part 1 sent it
    batch_id      text    NOT NULL, -- the batch that brought part 1
    -- When part 1 came. A day first declared in parts was first declared then: the store's
    -- list was taken before it, and a row that reaches HQ after it is late (reconcile), as
    -- after a whole first declaration.
    first_ms      bigint  NOT NULL,
    PRIMARY KEY (store, business_date)
);

-- The transactions of each draft's parts so far, numbered across its parts in the order the
-- store listed them; the same columns as day_txns, which they are copied into as they are.
CREATE TABLE draft_txns (
    business_date text COLLATE "C" NOT NULL,
    store         text COLLATE "C" NOT NULL,
    i             integer NOT NULL,
    terminal      text COLLATE "C" NOT NULL,
    seq           bigint NOT NULL,
    kind          text   NOT NULL,
    flow_no       bigint NOT NULL,
    amount        bigint NOT NULL,
    cash          bigint NOT NULL,
    card          bigint NOT NULL,
    qr            bigint NOT NULL,
    methods       bigint NOT NULL,
    PRIMARY KEY (business_date, store, i)
);

-- The exceptions each store's ledger flagged (hqwire.Exception): an oversell, a refund its
-- records of the sale do not cover, a parked event or a seq gap. HQ keeps one row per
-- (store, kind, terminal, seq, sku): the state with the highest change number the store
-- sent; a state with the same or a lower change number changes nothing. A withdrawn
-- exception is kept, withdrawn, so that an older state arriving later cannot bring it
-- back; reads leave it out. Times a store sent (at, resolved_at) are '' when none.
CREATE TABLE exceptions (
    store         text COLLATE "C" NOT NULL,
    kind          text COLLATE "C" NOT NULL, -- oversell, price, refund, parked or seq_gap
    terminal      text COLLATE "C" NOT NULL,
    seq           bigint  NOT NULL, -- the sale's (oversell), the refund's, the parked event's or the gap's first
    -- oversell: the SKU taken below zero, price: the SKU sold at another price (hqwire.EscapeSKU); parked: '' for a key's first
    -- content, the content's hash for each later one; refund and seq_gap: ''
    sku           text COLLATE "C" NOT NULL,
    change        bigint  NOT NULL, -- the store ledger's change number of this state
    business_date text COLLATE "C" NOT NULL,
    withdrawn     boolean NOT NULL, -- the ledger no longer holds it; the fields below are empty
    code          text    NOT NULL,
    detail        text    NOT NULL,
    qty_short     bigint  NOT NULL, -- oversell: units below zero; otherwise 0
    at            text    NOT NULL,
    resolved      boolean NOT NULL, -- the store's manager explained it
    resolved_at   text    NOT NULL,
    resolution    text    NOT NULL,
    batch_id      text    NOT NULL, -- the batch that brought this state
    received_ms   bigint  NOT NULL, -- when this state arrived
    PRIMARY KEY (store, kind, terminal, seq, sku)
);

-- Reconciliation reads one business date (of all stores or of one), in key order.
CREATE INDEX exceptions_by_date ON exceptions (business_date, store, kind, terminal, seq, sku);

-- hq-sync reconcile --open reads the exceptions no store manager has resolved, of every
-- date, in date and key order. Withdrawn and resolved exceptions stay for good, so a scan
-- of them all would grow with the years; this index holds the open ones alone.
CREATE INDEX exceptions_open ON exceptions (business_date, store, kind, terminal, seq, sku)
    WHERE NOT withdrawn AND NOT resolved;

-- Each reconciliation of a business date that ran to its end (hq-sync reconcile), of every
-- store (store '') or of one: serve --retain drops a day's partitions only once a run of
-- every store has covered the day.
CREATE TABLE reconcile_runs (
    business_date text COLLATE "C" NOT NULL,
    store         text COLLATE "C" NOT NULL, -- '' for every store
    finished_ms   bigint  NOT NULL,
    ok            boolean NOT NULL, -- the date reconciled exactly
    stores        integer NOT NULL,
    hq_txns       bigint  NOT NULL,
    differences   bigint  NOT NULL, -- transaction, totals and missing-declaration entries
    PRIMARY KEY (business_date, store, finished_ms)
);

-- The days serve --retain dropped (their partitions, declarations and exceptions): rows of
-- such a day a store sends again (a lost upload state sends everything) are acknowledged as
-- held, and no partition is made for them again.
CREATE TABLE dropped_days (
    business_date text COLLATE "C" PRIMARY KEY,
    dropped_ms    bigint NOT NULL
);
