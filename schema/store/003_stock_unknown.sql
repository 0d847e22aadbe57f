-- SKUs whose stock the ledger cannot prove: the ledger was refilled from HQ
-- (store-server restore --from-hq) and HQ held no opening stock or count of the SKU, or
-- not the whole of the store's history. The ledger's quantity of such a SKU is what the
-- moves HQ held add up to; it is shown as unknown (the API, the dashboard) until a manager
-- counts the shelf: a count (an adjustment with counted set) takes the SKU out.
CREATE TABLE stock_unknown (
    sku           TEXT    PRIMARY KEY,
    since         TEXT    NOT NULL, -- when the refill marked it
    why           TEXT    NOT NULL  -- no_opening (HQ held no opening or count) or incomplete (HQ lacked part of the history)
) WITHOUT ROWID;

CREATE TRIGGER stock_known_by_count AFTER INSERT ON adjustments WHEN NEW.counted IS NOT NULL BEGIN
    DELETE FROM stock_unknown WHERE sku = NEW.sku;
END;

-- The terminals of a ledger refilled from HQ: HQ holds a till's sales, refunds and day
-- closes, not its other events (scans, heartbeats), so the refilled ledger lacks those
-- between the ones it holds. Until it holds every seq of the terminal from from_seq up to
-- its highest, the next seq the store expects of the terminal is the first it lacks
-- (Ledger.Next), and the till is asked to send its events again from there (catch-up); the
-- events the ledger holds already come back as duplicates of what it holds.
CREATE TABLE refilled_terminals (
    terminal      TEXT    PRIMARY KEY,
    from_seq      INTEGER NOT NULL
) WITHOUT ROWID;
