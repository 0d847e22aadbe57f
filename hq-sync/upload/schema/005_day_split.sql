-- Each split of a day into parts has an id of its own (hq.StoreDay Split), sent with every
-- part: HQ adds a part only to the parts of its split. Parts kept before this migration
-- have none (""), which HQ takes as a split of its own, as its drafts from before have.
ALTER TABLE day_parts ADD COLUMN split TEXT NOT NULL DEFAULT '';
