-- A parked event is one the store refused for good (bad input, a key used again with other
-- content). The till kept its sale or refund, and counts it in its day close; the ledger
-- does not. HQ saw only the difference in the day's totals, with no transaction to name.
-- A parked event is now an exception like an oversell: the manager resolves it with what
-- explained it, and every change goes to HQ (exception_changes, migration 014), where the
-- reconciliation lists it beside the difference it explains.
--
-- business_date is the event's business date, or, for an event whose time could not be
-- read, the store's business date when it was parked. The parked events of a ledger from
-- before this migration take their event's date, or the UTC date they were parked.
ALTER TABLE parked ADD COLUMN business_date TEXT NOT NULL DEFAULT '';
ALTER TABLE parked ADD COLUMN resolved INTEGER NOT NULL DEFAULT 0;
ALTER TABLE parked ADD COLUMN resolved_at TEXT NOT NULL DEFAULT '';
ALTER TABLE parked ADD COLUMN resolution TEXT NOT NULL DEFAULT '';

UPDATE parked SET business_date = coalesce(
    (SELECT nullif(e.business_date, '') FROM events e WHERE e.terminal = parked.terminal AND e.seq = parked.seq
        AND e.status <> 'accepted'),
    date(parked_ms / 1000, 'unixepoch'));

CREATE TRIGGER parked_flagged AFTER INSERT ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER parked_changed AFTER UPDATE ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER parked_withdrawn AFTER DELETE ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', OLD.terminal, OLD.seq, '', OLD.business_date);
END;

-- The events parked before this migration are changes too: each goes to HQ once, numbered
-- as the triggers number changes.
INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    SELECT (SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
            FROM exception_changes) + row_number() OVER (ORDER BY terminal, seq) - 1,
        'parked', terminal, seq, '', business_date
    FROM parked ORDER BY terminal, seq;
