package postgres

// QueuePositionQuery is queuePositionQuery, for the plan's test.
const QueuePositionQuery = queuePositionQuery
