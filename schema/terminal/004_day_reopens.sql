-- A supervisor's reopen of a business day closed at this till (outbox.Tx.DayReopen, e.g. a
-- close pressed by mistake at 15:00). The close it undoes moves here from day_closes with
-- why and when, so the till trades on the day again and the day's next close is a new
-- day_close event, with a higher seq, that the store keeps in place of this one. The close
-- event itself was not withdrawn: the store holds it until the new close supersedes it.
CREATE TABLE day_reopens (
    n             INTEGER PRIMARY KEY,
    business_date TEXT    NOT NULL,             -- YYYY-MM-DD in the store's time zone
    close_seq     INTEGER NOT NULL,             -- the day_close event reopened
    close_payload BLOB    NOT NULL,             -- the totals it declared
    reason        TEXT    NOT NULL CHECK (reason <> ''),
    supervisor    TEXT    NOT NULL DEFAULT '',
    reopened_at   TEXT    NOT NULL              -- RFC 3339 with offset, by the device's clock
);
CREATE INDEX day_reopens_day ON day_reopens (business_date, n);
