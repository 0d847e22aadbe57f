-- A manager resolves an oversell exception once the shortfall is explained (the shelf
-- counted and the stock adjusted, goods found in the back room): when, and what was found.
-- The exception stays in the ledger; resolved ones leave the open list.
ALTER TABLE oversells ADD COLUMN resolved_at TEXT NOT NULL DEFAULT '';
ALTER TABLE oversells ADD COLUMN resolution TEXT NOT NULL DEFAULT '';
