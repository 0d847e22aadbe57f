-- A declaration larger than one batch may carry goes in parts (hq.StoreDay Part/Parts). When
-- such a day is due, its list is taken from the ledger once and split, and the parts wait
-- here, so that every part comes from the same snapshot; each batch takes the next part of
-- the day, and a part leaves once HQ acknowledged it. covered_rows is the day's sent_rows
-- when the list was taken: the last part's receipt makes it declared_rows, so a late row
-- sent while the parts go is declared by the next revision.
CREATE TABLE day_parts (
    business_date TEXT    NOT NULL,
    part          INTEGER NOT NULL,
    parts         INTEGER NOT NULL,
    revision      INTEGER NOT NULL,
    covered_rows  INTEGER NOT NULL,
    closed_at     TEXT    NOT NULL,
    txns          BLOB    NOT NULL, -- the part's transactions, the JSON of a []hq.Txn
    PRIMARY KEY (business_date, part)
) WITHOUT ROWID;

-- The parts a batch carries: JSON, business date -> {"revision", "part", "parts",
-- "covered"}. Its days column names only the days it declares whole.
ALTER TABLE batches ADD COLUMN parts TEXT NOT NULL DEFAULT '{}';
