-- ChangedJobs reads the jobs written after a revision. SQLite has one
-- writer at a time and every write takes its revision inside its
-- transaction, so revisions commit in order and an etag is the position in
-- the stream of job writes.
CREATE INDEX jobs_by_etag ON jobs (etag);
