-- Every change of an exception the ledger flags for a manager (an oversell line, a refund
-- exception), in order, so that hq-sync upload can send headquarters each exception's state
-- after it changes: flagged, resolved, reopened or withdrawn (deleted: a refund its sale,
-- arrived late, now covers). Triggers keep it, so no writer can forget a change; they fire
-- only when an exception changes, which no ordinary sale does.
--
-- id is the change number; rows are never deleted, so numbers are never reused. The uploader
-- reads the changes after the last one HQ acknowledged, and for each exception they name
-- the state the exception tables hold now (or that it is gone).
CREATE TABLE exception_changes (
    id            INTEGER PRIMARY KEY,
    kind          TEXT    NOT NULL, -- oversell or refund
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    sku           TEXT    NOT NULL, -- oversell: the SKU; refund: ''
    business_date TEXT    NOT NULL  -- of the sale or refund: what a withdrawn one is filed under
);

CREATE TRIGGER oversells_flagged AFTER INSERT ON oversells BEGIN
    INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    VALUES ('oversell', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER oversells_changed AFTER UPDATE ON oversells BEGIN
    INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    VALUES ('oversell', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER oversells_withdrawn AFTER DELETE ON oversells BEGIN
    INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    VALUES ('oversell', OLD.terminal, OLD.seq, OLD.sku, OLD.business_date);
END;
CREATE TRIGGER refund_exceptions_flagged AFTER INSERT ON refund_exceptions BEGIN
    INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    VALUES ('refund', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER refund_exceptions_changed AFTER UPDATE ON refund_exceptions BEGIN
    INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    VALUES ('refund', NEW.terminal, NEW.seq, '', NEW.business_date);
END;
CREATE TRIGGER refund_exceptions_withdrawn AFTER DELETE ON refund_exceptions BEGIN
    INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    VALUES ('refund', OLD.terminal, OLD.seq, '', OLD.business_date);
END;

-- The exceptions flagged before this migration are changes too: each goes to HQ once.
INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    SELECT 'oversell', terminal, seq, sku, business_date FROM oversells ORDER BY terminal, seq, sku;
INSERT INTO exception_changes (kind, terminal, seq, sku, business_date)
    SELECT 'refund', terminal, seq, '', business_date FROM refund_exceptions ORDER BY terminal, seq;
