-- Registered environments: one row per version. created is the revision of
-- the version's first put, so "latest" is the highest created of a name.
-- (Version 0004: 0003 holds the datastores of the same release.)
CREATE TABLE environments (
	workspace TEXT NOT NULL REFERENCES workspaces (name),
	name      TEXT NOT NULL,
	version   TEXT NOT NULL,
	created   INTEGER NOT NULL UNIQUE,
	etag      INTEGER NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, name, version)
) STRICT;
CREATE INDEX environments_by_name ON environments (workspace, name, created);
