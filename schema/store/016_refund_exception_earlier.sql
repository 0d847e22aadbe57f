-- A refund exception opened again on another problem carries the resolution it had
-- before, for as long as the problem stays of that code. Kept in its own column: found
-- back by its text in the detail, it could be found inside the problem's own text (a SKU
-- or a sale id may hold any text), and the detail grew with every later refund of the
-- sale. A reader shows detail || earlier.
ALTER TABLE refund_exceptions ADD COLUMN earlier TEXT NOT NULL DEFAULT '';
