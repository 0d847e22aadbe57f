-- Each terminal's last heartbeat (its reported backlog, for the manager's view and the
-- metrics) in one seek, whatever came after it. Only accepted heartbeats enter the index
-- (one a minute per terminal): sales never touch it.
CREATE INDEX events_heartbeats ON events (terminal, seq) WHERE kind = 'heartbeat' AND status = 'accepted';
