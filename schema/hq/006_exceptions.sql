-- The exceptions each store's ledger flagged (hq.Exception): an oversell (a sale took a
-- SKU below zero; one per sale and SKU) or a refund its records of the sale do not cover
-- (sku ''). HQ keeps one row per (store, kind, terminal, seq, sku): the state with the
-- highest change number the store sent. A state with the same or a lower change number
-- changes nothing, so a resend or a state overtaken on its way never goes back in time.
-- A withdrawn exception (the ledger no longer holds it) is kept, withdrawn, so that an
-- older state arriving later cannot bring it back; reads leave it out.
--
-- Times a store sent (at, resolved_at) are kept as RFC 3339 text, '' when none.

CREATE TABLE exceptions (
    store         TEXT    NOT NULL,
    kind          TEXT    NOT NULL, -- oversell or refund
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL, -- the sale's (oversell) or the refund's event
    sku           TEXT    NOT NULL, -- oversell: the SKU taken below zero; refund: ''
    change        INTEGER NOT NULL, -- the store ledger's change number of this state
    business_date TEXT    NOT NULL,
    withdrawn     INTEGER NOT NULL, -- 1: the ledger no longer holds it; the fields below are empty
    code          TEXT    NOT NULL,
    detail        TEXT    NOT NULL,
    qty_short     INTEGER NOT NULL, -- oversell: units below zero; refund: 0
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
