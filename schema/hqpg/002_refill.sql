-- What a store would need to be refilled from HQ (store-server restore --from-hq): the same
-- as schema/hq/002_refill.sql. From here on a sale's or refund's row keeps its payload
-- (rows.payload), the store's stock adjustments are kept in stock_moves.
CREATE TABLE stock_moves (
    store         text COLLATE "C" NOT NULL,
    id            text COLLATE "C" NOT NULL,
    n             bigint NOT NULL,
    sku           text   NOT NULL,
    delta         bigint NOT NULL,
    reason        text   NOT NULL, -- opening or adjust
    at            text   NOT NULL, -- RFC 3339 as the store sent it
    counted       bigint,           -- a count's units; NULL for an adjustment by a delta
    batch_id      text   NOT NULL,  -- the moves batch that brought it
    received_ms   bigint NOT NULL,
    PRIMARY KEY (store, id)
);

CREATE INDEX stock_moves_order ON stock_moves (store, n);
