-- A day whose declaration is larger than an HQ batch may carry cannot be declared: it is left
-- undeclared (HQ's reconcile shows it as no_store_day) instead of blocking every later batch
-- behind one HQ must refuse. skipped_rows is sent_rows when that was last found; a late row
-- of the day (sent_rows grows) makes it due again.
ALTER TABLE days ADD COLUMN skipped_rows INTEGER NOT NULL DEFAULT 0;
