-- A key can be parked with more than one content. The till keeps every content it was
-- answered conflict for (its day close counts each), and a key reused twice over (a till
-- restored from a backup, then again; three devices with one terminal id) has a third
-- content and more. The parked table kept one row per key: the third content was answered
-- conflict and kept nowhere at the store. It now keeps each distinct content (by its hash)
-- once; a redelivery of any of them changes nothing.
--
-- id numbers the parked contents. hash is the content's hash; a conflict parked before
-- this migration has none in the ledger, and the store-server reads it from the parked
-- content when it opens the ledger (Ledger.rehashParked; a rejection's is its event's).
--
-- sku is the parked content's identity at HQ (the sku of its hq.Exception, whose key is
-- kind, terminal, seq and sku): '' for the first content parked under a key, as every
-- parked event had before this migration (HQ holds them under it), and the content's hash
-- for each later one.
DROP TRIGGER parked_flagged;
DROP TRIGGER parked_changed;
DROP TRIGGER parked_withdrawn;
DROP INDEX parked_recent;
ALTER TABLE parked RENAME TO parked_019;

CREATE TABLE parked (
    id            INTEGER PRIMARY KEY,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    hash          TEXT    NOT NULL,
    sku           TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    code          TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    at            TEXT    NOT NULL,
    parked_ms     INTEGER NOT NULL,
    business_date TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    resolved_at   TEXT    NOT NULL DEFAULT '',
    resolution    TEXT    NOT NULL DEFAULT '',
    UNIQUE (terminal, seq, hash),
    UNIQUE (terminal, seq, sku)
);
CREATE INDEX parked_recent ON parked (parked_ms);

-- A rejection parked is its key's events row (final, not accepted): its hash is that row's.
-- A conflict parked behind an accepted event has its hash read at open.
INSERT INTO parked (terminal, seq, hash, sku, kind, code, message, payload, at, parked_ms, business_date,
        resolved, resolved_at, resolution)
    SELECT p.terminal, p.seq, coalesce((SELECT e.hash FROM events e WHERE e.terminal = p.terminal
            AND e.seq = p.seq AND e.final = 1 AND e.status <> 'accepted'), ''), '',
        p.kind, p.code, p.message, p.payload, p.at, p.parked_ms, p.business_date, p.resolved, p.resolved_at,
        p.resolution
    FROM parked_019 p ORDER BY p.parked_ms, p.terminal, p.seq;
DROP TABLE parked_019;

-- The triggers of 019, each change now of one parked content (its sku). An update of the
-- hash alone (read at open) changes nothing HQ holds.
CREATE TRIGGER parked_flagged AFTER INSERT ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER parked_changed AFTER UPDATE OF kind, code, message, payload, at, business_date, resolved,
        resolved_at, resolution ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', NEW.terminal, NEW.seq, NEW.sku, NEW.business_date);
END;
CREATE TRIGGER parked_withdrawn AFTER DELETE ON parked BEGIN
    INSERT INTO exception_changes (id, kind, terminal, seq, sku, business_date)
    VALUES ((SELECT max(coalesce(max(id), 0) + 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) * 1000)
        FROM exception_changes), 'parked', OLD.terminal, OLD.seq, OLD.sku, OLD.business_date);
END;
