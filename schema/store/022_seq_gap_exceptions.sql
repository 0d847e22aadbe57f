-- A seq gap (migration 021) is now an exception HQ hears of: the till's day close counts
-- the events of the gap, the store's rows do not, and HQ finance saw the difference with
-- nothing saying why. Each gap recorded is one change (exception_changes, migration 014)
-- of an exception of kind 'seq_gap', keyed by its terminal and first seq (from_seq; sku
-- ''). No manager resolves a gap in this release, and the store never deletes one: a gap
-- has the one change of its recording.
--
-- business_date is the business date of the event after the gap (to_seq + 1), as the
-- ledger filed it: the lost events came before it, and it is the day a till offline at
-- the restore made them rather than the day the store heard of it. The uploader reads it
-- again with the gap (ledger.HQReader), and files a gap whose event has no date under the
-- store's date when the gap was recorded (at_ms); this one, in UTC, is a placeholder.
CREATE TRIGGER seq_gap_recorded AFTER INSERT ON seq_gaps BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'seq_gap', NEW.terminal, NEW.from_seq, '',
        coalesce((SELECT nullif(e.business_date, '') FROM events e WHERE e.terminal = NEW.terminal
            AND e.seq = NEW.to_seq + 1), date(NEW.at_ms / 1000, 'unixepoch')));
END;

-- The gaps recorded before this migration are changes too: each goes to HQ once, numbered
-- as the triggers number changes.
INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    SELECT (SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
            FROM exception_changes) + row_number() OVER (ORDER BY g.at_ms, g.terminal, g.from_seq) - 1,
        'seq_gap', g.terminal, g.from_seq, '',
        coalesce((SELECT nullif(e.business_date, '') FROM events e WHERE e.terminal = g.terminal
            AND e.seq = g.to_seq + 1), date(g.at_ms / 1000, 'unixepoch'))
    FROM seq_gaps g ORDER BY g.at_ms, g.terminal, g.from_seq;
