-- A sale can be accepted after a refund of it: refused live, then resent offline once the
-- terminal had decided it (and refunded it) on its own. The refund was flagged
-- refund_sale_unknown when it came, and the ledger holds it to the sale again when the sale
-- is accepted. To know whether a group's sales have such refunds waiting, each commit with
-- a sale reads the open refund_sale_unknown exceptions: this index holds those, and only
-- those, so the read stays small however many exceptions managers have resolved.
CREATE INDEX refund_exceptions_open_unknown ON refund_exceptions (terminal, seq)
    WHERE resolved = 0 AND code = 'refund_sale_unknown';
