-- Registered environments: one row per version. created is the revision of
-- the version's first put, so "latest" is the highest created of a name.
-- (Version 0004: 0003 holds the datastores of the same release.)
CREATE TABLE environments (
	workspace text NOT NULL REFERENCES workspaces (name),
	name      text NOT NULL,
	version   text NOT NULL,
	created   bigint NOT NULL UNIQUE,
	etag      bigint NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, name, version)
);
CREATE INDEX environments_by_name ON environments (workspace, name, created);
