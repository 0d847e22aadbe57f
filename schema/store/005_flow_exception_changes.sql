-- Every change of a flow exception (schema/store/004_flow_exceptions.sql: booked, then
-- resolved by a manager), in order, so that hq-sync upload can send HQ each flow
-- exception's state after it changes. Flow exceptions go to HQ on a route of their own
-- (POST /v1/flow-exceptions), not in the batches' exceptions: a v0.1.0 serve refuses a
-- batch holding an exception kind it does not know, so they cannot share
-- exception_changes, which the uploader reads into its batches.
--
-- id is numbered as exception_changes' id is: one above the one before, and never below
-- the time of the change in microseconds since 1970, so that a ledger restored from a
-- backup numbers its next changes above those made since the backup. Triggers keep it, so
-- no writer can forget a change; rows are never deleted, and numbers are never reused.
CREATE TABLE flow_exception_changes (
    id       INTEGER PRIMARY KEY,
    terminal TEXT    NOT NULL,
    seq      INTEGER NOT NULL
);

CREATE TRIGGER flow_exceptions_flagged AFTER INSERT ON flow_exceptions BEGIN
    INSERT INTO flow_exception_changes (id, terminal, seq)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM flow_exception_changes), NEW.terminal, NEW.seq);
END;
CREATE TRIGGER flow_exceptions_changed AFTER UPDATE ON flow_exceptions BEGIN
    INSERT INTO flow_exception_changes (id, terminal, seq)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM flow_exception_changes), NEW.terminal, NEW.seq);
END;

-- The flow exceptions a ledger booked before this migration: one change each, in key order.
INSERT INTO flow_exception_changes (id, terminal, seq)
SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000 + row_number() OVER (ORDER BY terminal, seq),
    terminal, seq FROM flow_exceptions;
