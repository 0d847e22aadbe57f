-- Requests get n, the order they were recorded in, which the clock cannot disturb: a request's
-- record is pruned only once enough requests have been recorded after it (outbox.Store.Prune),
-- as a device clock that jumps forward makes a record a minute old look days old. n is an
-- alias of the rowid, so it is kept as it is by VACUUM; the existing records keep the order
-- their rowids gave them. As before, status 0 means the request's effect is committed but its
-- answer is not yet recorded.
CREATE TABLE requests_ordered (
    n            INTEGER PRIMARY KEY,
    token        TEXT    NOT NULL UNIQUE,
    fingerprint  TEXT    NOT NULL,
    status       INTEGER NOT NULL DEFAULT 0,
    body         BLOB,
    ref          TEXT    NOT NULL DEFAULT '',
    created_ms   INTEGER NOT NULL
);
INSERT INTO requests_ordered (n, token, fingerprint, status, body, ref, created_ms)
    SELECT rowid, token, fingerprint, status, body, ref, created_ms FROM requests ORDER BY rowid;
DROP TABLE requests;
ALTER TABLE requests_ordered RENAME TO requests;
