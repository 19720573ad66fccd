-- One row per node that existed and was removed: how long it lived and at
-- what price, so cost survives the node's record (the live nodes' share is
-- computed from their records).
CREATE TABLE node_usage (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	workspace TEXT NOT NULL,
	compute TEXT NOT NULL,
	node TEXT NOT NULL,
	started TEXT NOT NULL,
	ended TEXT NOT NULL,
	price_per_hour REAL NOT NULL
);
CREATE INDEX node_usage_by_compute ON node_usage (workspace, compute, ended);
