-- A store's declaration of a day in parts (hq.StoreDay.Part of Parts): the same tables and
-- meaning as the SQLite engine's schema/hq/002_day_parts.sql. HQ keeps the parts aside here,
-- in order, until the last one arrives; only then does the revision become the day's (days,
-- day_txns), and its draft is deleted. Reads of days never look here.
--
-- A store-day has at most one draft: part 1 of a revision replaces whatever was kept of the
-- day before, and a whole declaration (or a completed one) deletes a draft of its revision
-- or lower. A transaction that writes a day's draft_txns first locks its day_drafts row.

CREATE TABLE day_drafts (
    store         text COLLATE "C" NOT NULL,
    business_date text COLLATE "C" NOT NULL,
    revision      bigint  NOT NULL, -- the revision the parts declare
    parts         integer NOT NULL, -- how many parts the revision has
    next_part     integer NOT NULL, -- the only part that may follow (2 after part 1)
    txns          integer NOT NULL, -- transactions kept so far: the next part's first i
    closed_at     text    NOT NULL, -- as part 1 sent it
    batch_id      text    NOT NULL, -- the batch that brought part 1
    PRIMARY KEY (store, business_date)
);

-- The transactions of each draft's parts so far, numbered across its parts in the order the
-- store listed them; the same columns as day_txns, which they are copied into as they are.
CREATE TABLE draft_txns (
    business_date text COLLATE "C" NOT NULL,
    store         text COLLATE "C" NOT NULL,
    i             integer NOT NULL,
    terminal      text COLLATE "C" NOT NULL,
    seq           bigint NOT NULL,
    kind          text   NOT NULL,
    flow_no       bigint NOT NULL,
    amount        bigint NOT NULL,
    cash          bigint NOT NULL,
    card          bigint NOT NULL,
    qr            bigint NOT NULL,
    methods       bigint NOT NULL,
    PRIMARY KEY (business_date, store, i)
);
