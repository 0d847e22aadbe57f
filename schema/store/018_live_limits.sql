-- The manager's live limits and promo. Redis held them alone, and lost them with its data
-- (restarted empty, or a replica promoted before it had them): the store went back to the
-- default limits without a word, and its degraded-mode limiter never knew them. The ledger
-- keeps them now, and every rebuild gives them to Redis. One row; no row: never set (a
-- store-server of an earlier release kept them in Redis alone, and the first rebuild takes
-- them from there).
CREATE TABLE live_limits (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    window_ms      INTEGER NOT NULL CHECK (window_ms >= 0), -- 0: the default
    store          INTEGER NOT NULL CHECK (store >= 0),
    terminal       INTEGER NOT NULL CHECK (terminal >= 0),
    scan           INTEGER NOT NULL CHECK (scan >= 0),
    pay            INTEGER NOT NULL CHECK (pay >= 0),
    refund         INTEGER NOT NULL CHECK (refund >= 0),
    promo_percent  INTEGER NOT NULL DEFAULT 100 CHECK (promo_percent > 0),
    promo_until_ms INTEGER NOT NULL DEFAULT 0,  -- Unix ms when the promo ends by itself
    set_at         TEXT    NOT NULL
);
