-- When HQ last stored a batch of each store (hq.Storage LastBatches, hq-sync serve's
-- posgate_hq_last_batch_timestamp_seconds): read from the database, not kept in the
-- process, so it is right after a restart and across serve processes sharing a database.
-- On a chain's large database, build it beforehand without blocking uploads
-- (CREATE INDEX CONCURRENTLY batches_by_time ON batches (store, stored_ms)); this then
-- finds it there.
CREATE INDEX IF NOT EXISTS batches_by_time ON batches (store, stored_ms);
