-- A sale's stock movement is its lines. stock_moves kept a second copy of every sale (one
-- row per SKU of each sale, the sum of its lines' quantities): three more rows and one more
-- statement in every group commit for nothing sale_lines does not already say. From now on
-- stock_moves holds the other movements (opening stock, adjustments, restocking refunds),
-- and the view stock_flow names every movement: stock = Σ stock_flow.delta per SKU
-- (invariant 4). The sale rows removed here are exactly what the view derives from the
-- sales' lines (same SKU, same Σ quantity), so the proof of stock does not change.
DELETE FROM stock_moves WHERE reason = 'sale';
CREATE VIEW stock_flow (sku, delta, reason, ref, at) AS
    SELECT sku, delta, reason, ref, at FROM stock_moves
    UNION ALL
    SELECT l.sku, -l.qty, 'sale', l.terminal || ':' || l.seq, e.at
    FROM sale_lines l LEFT JOIN events e ON e.terminal = l.terminal AND e.seq = l.seq;

-- hq-sync's uploader keeps what it has sent in its own state database; the ledger never
-- sets these columns, and the partial index over unsent rows was a copy of every id.
DROP INDEX hq_outbox_unsent;
ALTER TABLE hq_outbox DROP COLUMN batch_id;
ALTER TABLE hq_outbox DROP COLUMN sent_ms;
