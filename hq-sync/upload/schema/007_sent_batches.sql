-- A store that trades all day sends a batch every few seconds (--batch-age, 2 s): tens of
-- thousands a day, and each sent batch stayed in the state for good with its receipt. Every
-- --status and every metrics scrape read the whole table for the time of the last one sent
-- (a second a scrape after a month). Sent batches are now kept for a week (markSent deletes
-- older ones), and this index answers that read and the deletion.
CREATE INDEX batches_sent ON batches (sent_at) WHERE state = 'sent';
