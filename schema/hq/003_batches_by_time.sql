-- When HQ last stored a batch of each store (hq.Storage LastBatches, hq-sync serve's
-- posgate_hq_last_batch_timestamp_seconds): read from the database, not kept in the
-- process, so it is right after a restart and across serve processes sharing a database.
CREATE INDEX batches_by_time ON batches (store, stored_ms);
