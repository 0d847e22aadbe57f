-- A store's flow exceptions (hqwire.FlowException, POST /v1/flow-exceptions): a replayed
-- sale or refund whose receipt prints a flow number (flow_given) the store had meanwhile
-- given to another transaction of the date (held_by, terminal:seq); the store booked it under
-- flow_booked. One row per (store, terminal, seq), the replayed event's: the state with the
-- highest change number the store sent, booked or resolved by its manager.
CREATE TABLE flow_exceptions (
    store         text COLLATE "C" NOT NULL,
    terminal      text COLLATE "C" NOT NULL,
    seq           bigint  NOT NULL,
    change        bigint  NOT NULL, -- the store ledger's change number of this state
    kind          text COLLATE "C" NOT NULL, -- sale or refund
    flow_given    bigint  NOT NULL,
    flow_booked   bigint  NOT NULL,
    held_by       text    NOT NULL, -- terminal:seq, or '' when the ledger held no transaction under flow_given
    at            text    NOT NULL,
    business_date text COLLATE "C" NOT NULL,
    resolved      boolean NOT NULL, -- the store's manager dealt with it
    resolved_at   text    NOT NULL,
    resolution    text    NOT NULL,
    batch_id      text    NOT NULL, -- the flow exceptions batch that brought this state
    received_ms   bigint  NOT NULL, -- when this state arrived
    PRIMARY KEY (store, terminal, seq)
);

-- Reconciliation reads one business date (of all stores or of one), in key order.
CREATE INDEX flow_exceptions_by_date ON flow_exceptions (business_date, store, terminal, seq);
