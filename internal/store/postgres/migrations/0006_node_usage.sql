-- One row per node that existed and was removed: how long it lived and at
-- what price, so cost survives the node's record (the live nodes' share is
-- computed from their records).
CREATE TABLE node_usage (
	id bigserial PRIMARY KEY,
	workspace text NOT NULL,
	compute text NOT NULL,
	node text NOT NULL,
	started timestamptz NOT NULL,
	ended timestamptz NOT NULL,
	price_per_hour double precision NOT NULL
);
CREATE INDEX node_usage_by_compute ON node_usage (workspace, compute, ended);
