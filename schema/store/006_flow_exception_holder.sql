-- The transaction (terminal:seq) that held a flow exception's flow_given when the ledger
-- booked the replay under flow_booked: the other customer's receipt. It is a fact of the
-- booking, written with the row (schema/store/004_flow_exceptions.sql). Before, the readers
-- looked it up in the events at each read, and lost it once the day's events moved to a
-- month's archive (store-server --keep): a resolution the uploader sent after that named no
-- holder, and HQ took the empty one in place of the one it held.
--
-- The flow exceptions booked before this migration take their holder from the events the
-- ledger holds now; one whose day was archived already keeps held_by empty. The fill is no
-- change of the flow exception (flow_exception_changes): HQ holds the state it was sent,
-- and an empty held_by sent again would replace the holder it received before the archive.
DROP TRIGGER flow_exceptions_changed;

ALTER TABLE flow_exceptions ADD COLUMN held_by TEXT NOT NULL DEFAULT '';

UPDATE flow_exceptions SET held_by = coalesce((SELECT e.terminal || ':' || e.seq FROM events e
    WHERE e.business_date = flow_exceptions.business_date AND e.flow_no = flow_exceptions.flow_given LIMIT 1), '');

CREATE TRIGGER flow_exceptions_changed AFTER UPDATE ON flow_exceptions BEGIN
    INSERT INTO flow_exception_changes (id, terminal, seq)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM flow_exception_changes), NEW.terminal, NEW.seq);
END;
