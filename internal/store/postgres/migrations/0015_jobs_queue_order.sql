-- A job's queue position (job show) counts the queued jobs of its compute
-- ahead of it: higher priority, then created earlier. This index makes that
-- two range counts over the part of the queue ahead. It also answers the
-- count of a workspace's queued jobs alone, as jobs_by_status_workspace
-- (0014) did, which it replaces.
DROP INDEX jobs_by_status_workspace;
CREATE INDEX jobs_queue_order ON jobs (status, workspace, compute, priority, created);
