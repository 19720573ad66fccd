-- Datastores: named places data lives, referenced by jobs as
-- azureml://datastores/NAME/paths/PATH. (Version 0003 leaves 0002 to the
-- environments table developed alongside.)
CREATE TABLE datastores (
	workspace TEXT NOT NULL REFERENCES workspaces (name),
	name      TEXT NOT NULL,
	etag      INTEGER NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, name)
) STRICT;
