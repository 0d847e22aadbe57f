-- Exceptions a ledger refilled from HQ books as HQ held them (store-server restore
-- --from-hq, Ledger.RestoreExceptions). HQ holds a parked content's detail (what the event
-- was and why it was refused), not its payload: a parked content restored from HQ keeps that
-- detail in hq_detail, which the uploader sends as it was; '' for every content the store
-- parked itself. Its hash is its sku (a later content's), or '' when HQ's key names the
-- first content of the key, whose hash HQ never held. When the till sends that content
-- again (its catch-up after the refill), the store parks it over the restored row: the row
-- takes the content's hash, payload and verdict, and hq_detail goes back to '', its
-- resolution kept, so that the content stays one exception at HQ.
ALTER TABLE parked ADD COLUMN hq_detail TEXT NOT NULL DEFAULT '';
