-- Budgets: spending limits on a workspace, compute or tag, with the
-- thresholds already alerted (so a restart does not alert again).
CREATE TABLE budgets (
	workspace text NOT NULL REFERENCES workspaces (name),
	name      text NOT NULL,
	etag      bigint NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, name)
);
