-- A store flow number is now unique through its event: each accepted sale and refund
-- carries its flow number in its events row. The flow_numbers table said the same thing in
-- a second b-tree, one more statement and one more page in every group commit.
CREATE UNIQUE INDEX events_flow ON events (business_date, flow_no) WHERE flow_no IS NOT NULL;
DROP TABLE flow_numbers;
