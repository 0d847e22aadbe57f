-- A store's flow exceptions (hqwire.FlowException, POST /v1/flow-exceptions): a replayed
-- sale or refund whose receipt prints a flow number (flow_given) the store had meanwhile
-- given to another transaction of the date (held_by, terminal:seq); the store booked it under
-- flow_booked. One row per (store, terminal, seq), the replayed event's: the state with the
-- highest change number the store sent, booked or resolved by its manager.
CREATE TABLE flow_exceptions (
    store         TEXT    NOT NULL,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    change        INTEGER NOT NULL, -- the store ledger's change number of this state
    kind          TEXT    NOT NULL, -- sale or refund
    flow_given    INTEGER NOT NULL,
    flow_booked   INTEGER NOT NULL,
    held_by       TEXT    NOT NULL, -- terminal:seq, or '' when the ledger held no transaction under flow_given
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL, -- 1: the store's manager dealt with it
    resolved_at   TEXT    NOT NULL,
    resolution    TEXT    NOT NULL,
    batch_id      TEXT    NOT NULL, -- the flow exceptions batch that brought this state
    received_ms   INTEGER NOT NULL, -- when this state arrived
    PRIMARY KEY (store, terminal, seq)
) WITHOUT ROWID;

-- Reconciliation reads one business date (of all stores or of one), in key order.
CREATE INDEX flow_exceptions_by_date ON flow_exceptions (business_date, store, terminal, seq);
