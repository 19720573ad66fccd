-- A job's queue position (job show) counts the queued jobs of its compute
-- ahead of it: higher priority, then created earlier. This index makes that
-- two range counts over the part of the queue ahead. It replaces 0014's
-- jobs_by_status_workspace, whose count admission now reads from
-- queued_jobs (0015).
DROP INDEX jobs_by_status_workspace;
CREATE INDEX jobs_queue_order ON jobs (status, workspace, compute, priority, created);
