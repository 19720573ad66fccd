-- Admission counts a workspace's queued jobs on every submission
-- (limits.max_queued_jobs). With only jobs_by_status the count read each
-- queued row to check its workspace; this index answers it alone.
CREATE INDEX jobs_by_status_workspace ON jobs (status, workspace, created);
