-- kv batches_sent counts the batches HQ acknowledged to this state (markSent), for --status.
-- next_batch, which it read before, counts batches recorded in the state's current series:
-- a new series (HQ holds the state's next batch ids with other content) starts it at 0
-- again, and a batch HQ never took counts in it. A state from before starts from the
-- batches it holds as sent (a week of them) or, if more, its series' counter less the batch
-- pending: the best it can tell.
INSERT INTO kv (k, v) SELECT 'batches_sent', max(
    (SELECT count(*) FROM batches WHERE state = 'sent'),
    coalesce((SELECT CAST(v AS INTEGER) FROM kv WHERE k = 'next_batch'), 0)
        - (SELECT count(*) FROM batches WHERE state = 'pending'))
WHERE true
ON CONFLICT (k) DO NOTHING;
