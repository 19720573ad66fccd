-- Registered components: one row per version. created is the revision of
-- the version's first put, so "latest" is the highest created of a name.
-- (Pipeline steps run them.)
CREATE TABLE components (
	workspace TEXT NOT NULL REFERENCES workspaces (name),
	name      TEXT NOT NULL,
	version   TEXT NOT NULL,
	created   INTEGER NOT NULL UNIQUE,
	etag      INTEGER NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, name, version)
) STRICT;
CREATE INDEX components_by_name ON components (workspace, name, created);
