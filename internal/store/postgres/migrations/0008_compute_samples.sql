-- A compute's state once a minute (nodes by state, jobs, utilisation), for
-- charts; the controller keeps a week.
CREATE TABLE compute_samples (
	workspace text NOT NULL,
	compute   text NOT NULL,
	at        timestamptz NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, compute, at)
);
CREATE INDEX compute_samples_by_time ON compute_samples (at);
