-- Migration 012's index served a read of every open refund_sale_unknown exception in each
-- commit with a sale, which grew with the exceptions nobody resolved. The ledger now knows
-- which sales a commit accepted in place of a live refusal (the only way a refund can come
-- before its sale) and holds their refunds again without reading the exceptions.
DROP INDEX refund_exceptions_open_unknown;
