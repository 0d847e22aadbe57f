-- HQ's database (PostgreSQL engine, hq-sync serve): the same tables and meaning as the
-- SQLite engine's schema/hq/001_hq.sql.
--
-- A batch id is unique per store and remembers its content hash and the receipt answered
-- the first time. A row is unique per (store, terminal, seq) across all batches; sales and
-- refunds are kept as figures and content hash (their payloads stay in the store ledger),
-- a day close keeps its payload. A store's declaration of a business day keeps only its
-- highest revision; its transactions live in day_txns. Keys are COLLATE "C" so that every engine orders them byte-wise. Money is
-- integer fen; times HQ records itself are Unix milliseconds (*_ms); times a store sent
-- (at, closed_at) are kept as the RFC 3339 text it sent.

CREATE TABLE batches (
    store        text COLLATE "C" NOT NULL,
    batch_id     text COLLATE "C" NOT NULL,
    content_hash text   NOT NULL,
    receipt      text   NOT NULL, -- the hq.Receipt JSON answered the first time
    stored_ms    bigint NOT NULL,
    PRIMARY KEY (store, batch_id)
);

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
    PRIMARY KEY (store, terminal, seq)
);

-- Reconciliation reads one business date, store by store, in key order.
CREATE INDEX rows_by_date ON rows (business_date, store, terminal, seq);

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

-- The transactions of each day's current revision, in the order the store listed them.
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
);
