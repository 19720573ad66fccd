-- The controller follows node writes as it follows job writes (0013):
-- rev is the revision of the node's last PutNode, so ChangedNodes reads the
-- nodes written after a revision instead of every node each turn.
-- Heartbeats write beat (their fields, overlaid on doc when read) and
-- last_seen (the last heartbeat, Unix nanoseconds; 0: none) without taking a
-- revision: they are no change the controller decides on, except liveness,
-- which reads last_seen from its index. Rows from before have rev 0 (read by
-- the controller's first, full load) and no beat.
ALTER TABLE nodes ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN beat TEXT;
ALTER TABLE nodes ADD COLUMN last_seen INTEGER NOT NULL DEFAULT 0;
UPDATE nodes SET last_seen = coalesce(
	CAST(round((julianday(json_extract(doc, '$.last_heartbeat')) - 2440587.5) * 86400000) AS INTEGER) * 1000000, 0)
	WHERE json_extract(doc, '$.last_heartbeat') IS NOT NULL;
CREATE INDEX nodes_by_rev ON nodes (rev);
CREATE INDEX nodes_by_last_seen ON nodes (last_seen);
