-- The builds before migration 016 wrote a reopened refund exception's earlier resolution
-- into its detail. Left there, the next refund of the sale wrote the fresh detail over it
-- and lost it. It moves to column earlier: the text from the later of the two ways an
-- earlier resolution begins (one per code it can follow).
UPDATE refund_exceptions SET earlier = substr(detail, f.p), detail = substr(detail, 1, f.p - 1)
FROM (SELECT terminal AS t, seq AS s, max(instr(detail, ' (earlier refund_sale_unknown, resolved: '),
        instr(detail, ' (earlier refund_exceeds_sale, resolved: ')) AS p
    FROM refund_exceptions) AS f
WHERE refund_exceptions.terminal = f.t AND refund_exceptions.seq = f.s AND f.p > 0
    AND refund_exceptions.earlier = '';
