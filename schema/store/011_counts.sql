-- A shelf count (Ledger.Count) books the difference between what was counted and the
-- ledger's quantity at the moment it is booked, as an adjustment. A retried count must
-- answer with the first booking and the same id reused for another count must be refused,
-- but the delta alone cannot tell a retry from another count (the ledger's quantity may
-- have moved in between): the adjustment keeps what was counted. NULL for an adjustment by
-- a given delta and for opening stock.
ALTER TABLE adjustments ADD COLUMN counted INTEGER CHECK (counted >= 0);
