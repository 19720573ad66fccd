-- Metric values jobs log (##tide metric lines of their output), keyed by
-- the log line that carried them so a resent batch is stored once. step is
-- -1 when the job gave none (its index in the series is used).
CREATE TABLE metrics (
	workspace TEXT NOT NULL,
	job       TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	name      TEXT NOT NULL,
	step      INTEGER NOT NULL,
	value     REAL NOT NULL,
	time      TEXT NOT NULL,
	PRIMARY KEY (workspace, job, seq, name)
) STRICT, WITHOUT ROWID;
CREATE INDEX metrics_by_name ON metrics (workspace, job, name, seq);
