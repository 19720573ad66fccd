-- ChangedJobs reads the jobs written after a cursor. Revisions come from a
-- sequence and may commit out of order, so the cursor is a snapshot's xmin
-- (the oldest transaction still running): every write not yet visible to a
-- reader belongs to a transaction at or after it. txid is the transaction
-- that last wrote the row; rows from before have 0 and are read by the
-- controller's first, full load.
ALTER TABLE jobs ADD COLUMN txid xid8 NOT NULL DEFAULT '0';
CREATE INDEX jobs_by_txid ON jobs (txid);
