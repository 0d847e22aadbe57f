-- What the ledger's archive (Archive: the days older than store-server --keep that HQ holds
-- whole, moved to a month's archive) reads and deletes of a day, by index rather than by
-- reading the whole table each time: a day's events (events_date), and the lines of a day's
-- sales (sale_lines_event: a sale's lines by its key). The first archive of a year-old
-- ledger read the events table and the sale lines in full several times a month.
--
-- events_date takes each commit's events at the end of their day: one page a commit.
-- sale_lines_event takes a commit's lines at one place per terminal.
CREATE INDEX events_date ON events (business_date);
CREATE INDEX sale_lines_event ON sale_lines (terminal, seq);
