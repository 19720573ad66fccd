-- The controller follows compute writes as it follows job (0013) and node
-- (0017) writes: txid is the transaction of the compute's last PutCompute,
-- so ChangedComputes reads the computes written after a snapshot's xmin
-- instead of decoding every compute twice a turn. Rows from before have
-- txid 0 (read by the controller's first, full load).
ALTER TABLE computes ADD COLUMN txid xid8 NOT NULL DEFAULT '0';
CREATE INDEX computes_by_txid ON computes (txid);
