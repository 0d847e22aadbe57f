-- Each state numbers its batches in a random series of its own: batch ids are
-- {store}-{batch_series}-{next_batch}, e.g. S1-9f86d081-000000042. A state lost and started
-- again (the ledger intact) would otherwise count from S1-000000001 again and name other
-- content with ids HQ already holds, and HQ would refuse every batch as batch_id_reused.
-- A state from before series takes one here; a batch it recorded keeps its id.
INSERT INTO kv (k, v) VALUES ('batch_series', lower(hex(randomblob(4)))) ON CONFLICT (k) DO NOTHING;
