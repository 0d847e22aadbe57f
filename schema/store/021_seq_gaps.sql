-- Gaps in a terminal's seq order that the store took: the events from_seq..to_seq of the
-- terminal were sent to (and acked by) a ledger this one is not, and its next event, to_seq
-- + 1, was accepted without them. reason is 'restored' (the ledger was restored from a
-- backup, GET /v1/backup, made before the till sent them) or 'new_ledger' (the ledger held
-- no event of the terminal: a data directory lost and started empty). The events are at
-- the till (its day close counts them), and at HQ if the uploader of the lost ledger sent
-- them, but not here. at_ms is when the store accepted the event after the gap.
--
-- The store accepts such a jump once per terminal after a restore (meta restored_ms, set
-- when a ledger carrying the backup's mark backup_ms is first opened) or for a terminal
-- the ledger holds nothing of; any other jump is answered out_of_order.
CREATE TABLE seq_gaps (
    terminal      TEXT    NOT NULL,
    from_seq      INTEGER NOT NULL CHECK (from_seq > 0),
    to_seq        INTEGER NOT NULL CHECK (to_seq >= from_seq),
    at_ms         INTEGER NOT NULL,
    reason        TEXT    NOT NULL CHECK (reason IN ('restored', 'new_ledger')),
    PRIMARY KEY (terminal, from_seq)
);
