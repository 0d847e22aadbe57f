-- Migration 012's index served a read of every open refund_sale_unknown exception in each
-- commit with a sale, which grew with the exceptions nobody resolved. The ledger now asks
-- index refunds_sale, for the sales a commit accepts, which of them it holds refunds of.
DROP INDEX refund_exceptions_open_unknown;
