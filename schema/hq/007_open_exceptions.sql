-- hq-sync reconcile --open reads the exceptions no store manager has resolved, of every
-- date, in date and key order. Withdrawn and resolved exceptions stay for good, so a scan
-- of them all would grow with the years; this index holds the open ones alone.
CREATE INDEX exceptions_open ON exceptions (business_date, store, kind, terminal, seq, sku)
    WHERE NOT withdrawn AND NOT resolved;
