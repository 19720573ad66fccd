-- Registered data assets: one row per version. created is the revision of
-- the version's first put, so "latest" is the highest created of a name.
-- (Jobs reference them as azureml:NAME:VERSION or azureml:NAME@latest.)
CREATE TABLE data_assets (
	workspace text NOT NULL REFERENCES workspaces (name),
	name      text NOT NULL,
	version   text NOT NULL,
	created   bigint NOT NULL UNIQUE,
	etag      bigint NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, name, version)
);
CREATE INDEX data_assets_by_name ON data_assets (workspace, name, created);
