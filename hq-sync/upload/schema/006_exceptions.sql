-- The exceptions the store's ledger flags (oversell lines, refund exceptions) go to HQ beside
-- the rows, as each changes: the ledger numbers every change (its exception_changes), and
-- kv exceptions_through is the last change number HQ acknowledged (every exception changed
-- up to it is at HQ in its state since). A batch's exceptions_through is the cursor its
-- receipt moves to (0: it carries no exceptions). kv hq_takes_exceptions is '1' once a
-- receipt said HQ takes them; until then none are sent (an HQ of an earlier release refuses
-- a batch with a field it does not know).
ALTER TABLE batches ADD COLUMN exceptions_through INTEGER NOT NULL DEFAULT 0;
