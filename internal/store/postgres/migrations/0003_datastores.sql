-- Datastores: named places data lives, referenced by jobs as
-- azureml://datastores/NAME/paths/PATH. (Version 0003 leaves 0002 to the
-- environments table developed alongside.)
CREATE TABLE datastores (
	workspace text NOT NULL REFERENCES workspaces (name),
	name      text NOT NULL,
	etag      bigint NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, name)
);
