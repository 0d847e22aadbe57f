-- A replayed sale or refund whose flow number the store had given again since it lost the
-- event (a ledger restored from a backup or started empty, the store selling in degrade mode
-- or on a Redis that lost its counters meanwhile): the customer's receipt prints flow_given,
-- which another sale or refund of the date now holds in the ledger; the ledger booked the
-- replay under flow_booked, the date's next number. The sale stands; a manager resolves the
-- exception with a note of how the two receipts were told apart. One row per event.
CREATE TABLE flow_exceptions (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL,   -- sale or refund
    flow_given    INTEGER NOT NULL CHECK (flow_given > 0),
    flow_booked   INTEGER NOT NULL CHECK (flow_booked > 0),
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    resolved_at   TEXT    NOT NULL DEFAULT '',
    resolution    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (terminal, seq)
);
CREATE INDEX flow_exceptions_date ON flow_exceptions (business_date);
