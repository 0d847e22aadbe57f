-- Migration 014 numbered changes one after the other from 1. A ledger restored from a
-- backup then numbers its next changes at or below those the uploader sent since the
-- backup (its cursor), and they are never read; HQ, which keeps the state with the
-- highest number, would ignore them too. A change is now numbered one above the one
-- before and never below the time of the change in microseconds since 1970: a restored
-- ledger's next changes go above those made since its backup (unless its clock is behind
-- the clock of those changes). Numbers still only grow.
DROP TRIGGER oversells_flagged;
DROP TRIGGER oversells_changed;
DROP TRIGGER oversells_withdrawn;
DROP TRIGGER refund_exceptions_flagged;
DROP TRIGGER refund_exceptions_changed;
DROP TRIGGER refund_exceptions_withdrawn;

CREATE TRIGGER oversells_flagged AFTER INSERT ON oversells BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'oversell', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER oversells_changed AFTER UPDATE ON oversells BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'oversell', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER oversells_withdrawn AFTER DELETE ON oversells BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'oversell', OLD.terminal, OLD.seq, OLD.sku, OLD.business_date);
END;
CREATE TRIGGER refund_exceptions_flagged AFTER INSERT ON refund_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'refund', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER refund_exceptions_changed AFTER UPDATE ON refund_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'refund', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER refund_exceptions_withdrawn AFTER DELETE ON refund_exceptions BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'refund', OLD.terminal, OLD.seq, '', OLD.business_date);
END;
