-- Metric values jobs log (##tide metric lines of their output), keyed by
-- the log line that carried them so a resent batch is stored once. step is
-- -1 when the job gave none (its index in the series is used).
CREATE TABLE metrics (
	workspace text NOT NULL,
	job       text NOT NULL,
	seq       bigint NOT NULL,
	name      text NOT NULL,
	step      bigint NOT NULL,
	value     double precision NOT NULL,
	time      timestamptz NOT NULL,
	PRIMARY KEY (workspace, job, seq, name)
);
CREATE INDEX metrics_by_name ON metrics (workspace, job, name, seq);
