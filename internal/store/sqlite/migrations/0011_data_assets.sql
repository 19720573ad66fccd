-- Registered data assets: one row per version. created is the revision of
-- the version's first put, so "latest" is the highest created of a name.
-- (Jobs reference them as azureml:NAME:VERSION or azureml:NAME@latest.)
CREATE TABLE data_assets (
	workspace TEXT NOT NULL REFERENCES workspaces (name),
	name      TEXT NOT NULL,
	version   TEXT NOT NULL,
	created   INTEGER NOT NULL UNIQUE,
	etag      INTEGER NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, name, version)
) STRICT;
CREATE INDEX data_assets_by_name ON data_assets (workspace, name, created);
