-- Budgets: spending limits on a workspace, compute or tag, with the
-- thresholds already alerted (so a restart does not alert again).
CREATE TABLE budgets (
	workspace TEXT NOT NULL REFERENCES workspaces (name),
	name      TEXT NOT NULL,
	etag      INTEGER NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, name)
) STRICT;
