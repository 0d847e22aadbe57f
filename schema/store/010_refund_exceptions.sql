-- A refund reaches the ledger after the gate has applied it (counters, restock, flow number),
-- and an offline one after the money left the till: the ledger cannot refuse it. It records
-- it, and flags it here when its own records do not cover it (the sale it names is not the
-- sale accepted at that seq, or with the store's earlier refunds of that sale it returns a
-- line, a SKU, a quantity or an amount the sale did not have), as an oversell is flagged:
-- for a manager to explain. One row per refund, the first problem found; the refund's own
-- rows stand as received.
CREATE TABLE refund_exceptions (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,              -- the refund's event
    code          TEXT    NOT NULL,              -- refund_sale_unknown, refund_exceeds_sale
    detail        TEXT    NOT NULL,
    at            TEXT    NOT NULL,              -- the refund's business time
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    resolved_at   TEXT    NOT NULL DEFAULT '',
    resolution    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (terminal, seq)
);
CREATE INDEX refund_exceptions_date ON refund_exceptions (business_date);
