-- hq_outbox kept a second copy of each event's business time, content hash and payload (the
-- payload alone is most of a sale's bytes, and every byte is written twice: to the WAL and
-- then to the database). The uploader now reads them from the event, by (terminal, seq).
ALTER TABLE hq_outbox DROP COLUMN at;
ALTER TABLE hq_outbox DROP COLUMN hash;
ALTER TABLE hq_outbox DROP COLUMN payload;
