-- The split id of a draft (hq.StoreDay Split): a part is added only to the parts of its own
-- split, so two splits of one revision (the store split the day again after HQ dropped a
-- part) never mix. Drafts kept before this migration have none and take no more parts;
-- their stores start them over with part 1.
ALTER TABLE day_drafts ADD COLUMN split text COLLATE "C" NOT NULL DEFAULT '';
