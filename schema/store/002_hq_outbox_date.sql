-- hq-sync upload declares a business date closed only when no row of that date is left
-- after its upload watermark: this index answers "is there a row of date D with id > W?"
-- with one seek instead of a scan of the unsent tail.
CREATE INDEX hq_outbox_date ON hq_outbox (business_date, id);
