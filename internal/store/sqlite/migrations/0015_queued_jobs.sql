-- queued_jobs counts each workspace's jobs in status Queued, kept by triggers
-- as jobs change, so that admission (limits.max_queued_jobs) reads one row
-- instead of counting the queue on every submission (even from an index, as
-- 0014 does, that costs as many rows as the queue holds). Jobs are never deleted.
CREATE TABLE queued_jobs (
	workspace TEXT PRIMARY KEY,
	n         INTEGER NOT NULL
) STRICT;

INSERT INTO queued_jobs (workspace, n)
	SELECT workspace, count(*) FROM jobs WHERE status = 'Queued' GROUP BY workspace;

CREATE TRIGGER jobs_queued_insert AFTER INSERT ON jobs WHEN new.status = 'Queued' BEGIN
	INSERT INTO queued_jobs (workspace, n) VALUES (new.workspace, 1)
		ON CONFLICT (workspace) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_queued_enter AFTER UPDATE OF status ON jobs
	WHEN old.status <> 'Queued' AND new.status = 'Queued' BEGIN
	INSERT INTO queued_jobs (workspace, n) VALUES (new.workspace, 1)
		ON CONFLICT (workspace) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_queued_leave AFTER UPDATE OF status ON jobs
	WHEN old.status = 'Queued' AND new.status <> 'Queued' BEGIN
	UPDATE queued_jobs SET n = n - 1 WHERE workspace = old.workspace;
END;
