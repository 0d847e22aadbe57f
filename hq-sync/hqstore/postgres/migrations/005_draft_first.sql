-- When part 1 of a draft came (ms since the epoch). A day first declared in parts was first
-- declared then: the store's list was taken before it, and a row that reaches HQ after it
-- is late (reconcile), as after a whole first declaration. Drafts kept before this
-- migration have 0, and a day they make first declared takes its last part's time.
ALTER TABLE day_drafts ADD COLUMN first_ms bigint NOT NULL DEFAULT 0;
