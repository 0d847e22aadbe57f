-- The business days a till has traded on, read by index: the open days a day close looks
-- for (outbox.Store.DayToClose) and GET /v1/status lists are found by seeking from one
-- traded day to the next, not by reading every sale the till ever made (a year of sales
-- took 70–100 ms a status request).
CREATE INDEX sales_day ON sales (business_date) WHERE state = 'completed';
CREATE INDEX refunds_day ON refunds (business_date) WHERE state = 'done';
