-- A store's declaration of a day in parts (hq.StoreDay.Part of Parts), for a day larger
-- than one batch may carry. HQ keeps the parts aside here, in order, until the last one
-- arrives; only then does the revision become the day's (days, day_txns), and its draft
-- is deleted. Reads of days never look here.
--
-- A store-day has at most one draft: part 1 of a revision replaces whatever was kept of the
-- day before, and a whole declaration (or a completed one) deletes a draft of its revision
-- or lower.

CREATE TABLE day_drafts (
    store         TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    revision      INTEGER NOT NULL, -- the revision the parts declare
    parts         INTEGER NOT NULL, -- how many parts the revision has
    next_part     INTEGER NOT NULL, -- the only part that may follow (2 after part 1)
    txns          INTEGER NOT NULL, -- transactions kept so far: the next part's first i
    closed_at     TEXT    NOT NULL, -- as part 1 sent it
    batch_id      TEXT    NOT NULL, -- the batch that brought part 1
    PRIMARY KEY (store, business_date)
) WITHOUT ROWID;

-- The transactions of each draft's parts so far, numbered across its parts in the order the
-- store listed them; the same columns as day_txns, which they are copied into as they are.
CREATE TABLE draft_txns (
    business_date TEXT    NOT NULL,
    store         TEXT    NOT NULL,
    i             INTEGER NOT NULL,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL,
    amount        INTEGER NOT NULL,
    cash          INTEGER NOT NULL,
    card          INTEGER NOT NULL,
    qr            INTEGER NOT NULL,
    methods       INTEGER NOT NULL,
    PRIMARY KEY (business_date, store, i)
) WITHOUT ROWID;
