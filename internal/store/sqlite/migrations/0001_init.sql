-- Resources are JSON documents (doc) with the columns queries filter and
-- sort on. etag is a database-wide revision number, so an etag is never
-- reused, not even by a resource deleted and created again.

CREATE TABLE revision (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	value INTEGER NOT NULL
) STRICT;
INSERT INTO revision (id, value) VALUES (1, 0);

CREATE TABLE workspaces (
	name TEXT PRIMARY KEY,
	doc  TEXT NOT NULL
) STRICT;

CREATE TABLE computes (
	workspace TEXT NOT NULL REFERENCES workspaces (name),
	name      TEXT NOT NULL,
	etag      INTEGER NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, name)
) STRICT;
CREATE INDEX computes_by_name ON computes (name, workspace);

-- created is the revision of the job's first put: the creation order.
CREATE TABLE jobs (
	workspace TEXT NOT NULL REFERENCES workspaces (name),
	name      TEXT NOT NULL,
	compute   TEXT NOT NULL,
	status    TEXT NOT NULL,
	created   INTEGER NOT NULL UNIQUE,
	etag      INTEGER NOT NULL,
	doc       TEXT NOT NULL,
	PRIMARY KEY (workspace, name)
) STRICT;
CREATE INDEX jobs_by_workspace ON jobs (workspace, created);
CREATE INDEX jobs_by_compute ON jobs (workspace, compute, created);
CREATE INDEX jobs_by_status ON jobs (status, created);

CREATE TABLE nodes (
	id        TEXT PRIMARY KEY,
	workspace TEXT NOT NULL,
	compute   TEXT NOT NULL,
	doc       TEXT NOT NULL
) STRICT;
CREATE INDEX nodes_by_compute ON nodes (workspace, compute, id);

-- counters hands out the dense per-job log seqs and per-resource event seqs.
CREATE TABLE counters (
	workspace TEXT NOT NULL,
	scope     TEXT NOT NULL,
	last      INTEGER NOT NULL,
	PRIMARY KEY (workspace, scope)
) STRICT;

CREATE TABLE logs (
	workspace TEXT NOT NULL,
	job       TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	attempt   INTEGER NOT NULL,
	node      INTEGER NOT NULL,
	node_seq  INTEGER NOT NULL,
	time      TEXT NOT NULL,
	stream    TEXT NOT NULL,
	text      TEXT NOT NULL,
	PRIMARY KEY (workspace, job, seq),
	UNIQUE (workspace, job, attempt, node, node_seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE events (
	workspace TEXT NOT NULL,
	resource  TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	time      TEXT NOT NULL,
	kind      TEXT NOT NULL,
	message   TEXT NOT NULL,
	PRIMARY KEY (workspace, resource, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE tokens (
	hash TEXT PRIMARY KEY,
	doc  TEXT NOT NULL
) STRICT;

CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;
