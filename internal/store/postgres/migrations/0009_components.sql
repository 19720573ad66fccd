-- Registered components: one row per version. created is the revision of
-- the version's first put, so "latest" is the highest created of a name.
-- (Pipeline steps run them.)
CREATE TABLE components (
	workspace text NOT NULL REFERENCES workspaces (name),
	name      text NOT NULL,
	version   text NOT NULL,
	created   bigint NOT NULL UNIQUE,
	etag      bigint NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, name, version)
);
CREATE INDEX components_by_name ON components (workspace, name, created);
