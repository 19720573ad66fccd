-- A compute's state once a minute (nodes by state, jobs, utilisation), for
-- charts; the controller keeps a week.
CREATE TABLE compute_samples (
	workspace TEXT NOT NULL,
	compute   TEXT NOT NULL,
	at        TEXT NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, compute, at)
) STRICT;
CREATE INDEX compute_samples_by_time ON compute_samples (at);
