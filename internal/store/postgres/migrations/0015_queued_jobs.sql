-- queued_jobs counts each workspace's jobs in status Queued, kept by triggers
-- as jobs change, so that admission (limits.max_queued_jobs) reads one row
-- instead of counting the queue on every submission (even from an index, as
-- 0014 does, that costs as many rows as the queue holds). Jobs are never deleted.
CREATE TABLE queued_jobs (
	workspace text PRIMARY KEY,
	n         bigint NOT NULL
);

INSERT INTO queued_jobs (workspace, n)
	SELECT workspace, count(*) FROM jobs WHERE status = 'Queued' GROUP BY workspace;

CREATE FUNCTION count_queued_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'UPDATE' AND OLD.status = 'Queued' THEN
		UPDATE queued_jobs SET n = n - 1 WHERE workspace = OLD.workspace;
	END IF;
	IF NEW.status = 'Queued' THEN
		INSERT INTO queued_jobs AS q (workspace, n) VALUES (NEW.workspace, 1)
			ON CONFLICT (workspace) DO UPDATE SET n = q.n + 1;
	END IF;
	RETURN NULL;
END
$$;

CREATE TRIGGER jobs_queued_insert AFTER INSERT ON jobs
	FOR EACH ROW WHEN (NEW.status = 'Queued') EXECUTE FUNCTION count_queued_jobs();

-- Only a change of status moves the count: the controller rewrites queued
-- jobs (pending reasons) without touching the counter row.
CREATE TRIGGER jobs_queued_update AFTER UPDATE OF status ON jobs
	FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION count_queued_jobs();
