-- The last two b-trees a sale wrote at one place per terminal (see 003): sales' and
-- payments' (terminal, seq) keys. A sale is now keyed by its store flow number, which the
-- store hands out in commit order, so a group's sales and payments go in at the end of
-- their tables. Its (terminal, seq) stays unique through the sale's event; the readers join
-- sales, payments and the HQ outbox by (business_date, flow_no).

CREATE TABLE sales_new (
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    sale_id       TEXT    NOT NULL,
    at            TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL,
    total         INTEGER NOT NULL CHECK (total >= 0),
    change        INTEGER NOT NULL CHECK (change >= 0),
    offline       INTEGER NOT NULL,
    oversold      INTEGER NOT NULL,
    PRIMARY KEY (business_date, flow_no)
) WITHOUT ROWID;
INSERT INTO sales_new (terminal, seq, sale_id, at, business_date, flow_no, total, change, offline, oversold)
    SELECT terminal, seq, sale_id, at, business_date, flow_no, total, change, offline, oversold FROM sales;

-- Tenders of accepted sales, as paid (cash before change; the sale row holds the change).
CREATE TABLE payments_new (
    business_date TEXT    NOT NULL,
    flow_no       INTEGER NOT NULL,
    n             INTEGER NOT NULL,
    terminal      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    method        TEXT    NOT NULL CHECK (method IN ('cash', 'card', 'qr')),
    amount        INTEGER NOT NULL CHECK (amount > 0),
    reference     TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (business_date, flow_no, n)
) WITHOUT ROWID;
INSERT INTO payments_new (business_date, flow_no, n, terminal, seq, method, amount, reference)
    SELECT s.business_date, s.flow_no, p.n, p.terminal, p.seq, p.method, p.amount, p.reference
    FROM payments p JOIN sales s ON s.terminal = p.terminal AND s.seq = p.seq;

DROP TABLE payments;
ALTER TABLE payments_new RENAME TO payments;
DROP TABLE sales;
ALTER TABLE sales_new RENAME TO sales;
