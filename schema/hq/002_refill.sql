-- What a store would need to be refilled from HQ (store-server restore --from-hq).
--
-- From this migration on, a sale's or refund's row keeps its payload (rows.payload, the
-- lines and payments as the till sent them), as a day close's always did: HQ recomputes the
-- row's hash from it on arrival (hq-sync serve), so the payload is the one the store
-- recorded. Rows stored before keep a NULL payload.
--
-- The store's stock adjustments (hqwire.StockMove): opening stock, a manager's adjustment,
-- a shelf count (counted not NULL). One row per (store, id), id being the adjustment's id at
-- the store; n is its order in the store's ledger.
CREATE TABLE stock_moves (
    store         TEXT    NOT NULL,
    id            TEXT    NOT NULL,
    n             INTEGER NOT NULL,
    sku           TEXT    NOT NULL,
    delta         INTEGER NOT NULL,
    reason        TEXT    NOT NULL, -- opening or adjust
    at            TEXT    NOT NULL, -- RFC 3339 as the store sent it
    counted       INTEGER,          -- a count's units; NULL for an adjustment by a delta
    batch_id      TEXT    NOT NULL, -- the moves batch that brought it
    received_ms   INTEGER NOT NULL,
    PRIMARY KEY (store, id)
) WITHOUT ROWID;

-- A restore reads a store's moves in its ledger's order.
CREATE INDEX stock_moves_order ON stock_moves (store, n);
