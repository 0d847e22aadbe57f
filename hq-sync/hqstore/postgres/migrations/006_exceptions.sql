-- The exceptions each store's ledger flagged (hq.Exception): the same table and meaning as
-- the SQLite engine's schema/hq/006_exceptions.sql. HQ keeps one row per (store, kind,
-- terminal, seq, sku): the state with the highest change number the store sent; a state
-- with the same or a lower change number changes nothing. A withdrawn exception is kept,
-- withdrawn, so that an older state arriving later cannot bring it back; reads leave it
-- out. Times a store sent (at, resolved_at) are kept as RFC 3339 text, '' when none.

CREATE TABLE exceptions (
    store         text COLLATE "C" NOT NULL,
    kind          text COLLATE "C" NOT NULL, -- oversell or refund
    terminal      text COLLATE "C" NOT NULL,
    seq           bigint  NOT NULL, -- the sale's (oversell) or the refund's event
    sku           text COLLATE "C" NOT NULL, -- oversell: the SKU taken below zero; refund: ''
    change        bigint  NOT NULL, -- the store ledger's change number of this state
    business_date text COLLATE "C" NOT NULL,
    withdrawn     boolean NOT NULL, -- the ledger no longer holds it; the fields below are empty
    code          text    NOT NULL,
    detail        text    NOT NULL,
    qty_short     bigint  NOT NULL, -- oversell: units below zero; refund: 0
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
