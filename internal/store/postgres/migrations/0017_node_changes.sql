-- The controller follows node writes as it follows job writes (0013): txid
-- is the transaction of the node's last PutNode, so ChangedNodes reads the
-- nodes written after a snapshot's xmin instead of every node each turn.
-- Heartbeats write beat (their fields, overlaid on doc when read) and
-- last_seen (the last heartbeat, Unix nanoseconds; 0: none) without touching txid:
-- they are no change the controller decides on, except liveness, which
-- reads last_seen from its index. Rows from before have txid 0 (read by the
-- controller's first, full load) and no beat.
ALTER TABLE nodes ADD COLUMN txid xid8 NOT NULL DEFAULT '0';
ALTER TABLE nodes ADD COLUMN beat jsonb;
ALTER TABLE nodes ADD COLUMN last_seen bigint NOT NULL DEFAULT 0;
UPDATE nodes SET last_seen = (extract(epoch FROM (doc->>'last_heartbeat')::timestamptz) * 1000000)::bigint * 1000
	WHERE doc ? 'last_heartbeat';
CREATE INDEX nodes_by_txid ON nodes (txid);
CREATE INDEX nodes_by_last_seen ON nodes (last_seen);
