package sqlite

// LastBatchQuery is lastBatchQuery, for the plan test.
const LastBatchQuery = lastBatchQuery
