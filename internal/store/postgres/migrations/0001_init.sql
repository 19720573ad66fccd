-- Resources are JSON documents (doc) with the columns queries filter and
-- sort on. etag comes from one sequence, so an etag is never reused, not even
-- by a resource deleted and created again; a sequence (unlike a counter row)
-- does not make concurrent transactions conflict.
CREATE SEQUENCE revision;

CREATE TABLE workspaces (
	name text PRIMARY KEY,
	doc  jsonb NOT NULL
);

CREATE TABLE computes (
	workspace text NOT NULL REFERENCES workspaces (name),
	name      text NOT NULL,
	etag      bigint NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, name)
);
CREATE INDEX computes_by_name ON computes (name, workspace);

-- created is the revision of the job's first put: the creation order.
CREATE TABLE jobs (
	workspace text NOT NULL REFERENCES workspaces (name),
	name      text NOT NULL,
	compute   text NOT NULL,
	status    text NOT NULL,
	created   bigint NOT NULL UNIQUE,
	etag      bigint NOT NULL,
	doc       jsonb NOT NULL,
	PRIMARY KEY (workspace, name)
);
CREATE INDEX jobs_by_workspace ON jobs (workspace, created);
CREATE INDEX jobs_by_compute ON jobs (workspace, compute, created);
CREATE INDEX jobs_by_status ON jobs (status, created);

CREATE TABLE nodes (
	id        text PRIMARY KEY,
	workspace text NOT NULL,
	compute   text NOT NULL,
	doc       jsonb NOT NULL
);
CREATE INDEX nodes_by_compute ON nodes (workspace, compute, id);

-- counters hands out the dense per-job log seqs and per-resource event seqs.
-- Two transactions taking seqs from the same counter conflict on its row, and
-- one of them is retried, so seqs stay dense and unique.
CREATE TABLE counters (
	workspace text NOT NULL,
	scope     text NOT NULL,
	last      bigint NOT NULL,
	PRIMARY KEY (workspace, scope)
);

CREATE TABLE logs (
	workspace text NOT NULL,
	job       text NOT NULL,
	seq       bigint NOT NULL,
	attempt   integer NOT NULL,
	node      integer NOT NULL,
	node_seq  bigint NOT NULL,
	time      timestamptz NOT NULL,
	stream    text NOT NULL,
	text      text NOT NULL,
	PRIMARY KEY (workspace, job, seq),
	UNIQUE (workspace, job, attempt, node, node_seq)
);

CREATE TABLE events (
	workspace text NOT NULL,
	resource  text NOT NULL,
	seq       bigint NOT NULL,
	time      timestamptz NOT NULL,
	kind      text NOT NULL,
	message   text NOT NULL,
	PRIMARY KEY (workspace, resource, seq)
);

CREATE TABLE tokens (
	hash text PRIMARY KEY,
	doc  jsonb NOT NULL
);

CREATE TABLE settings (
	key   text PRIMARY KEY,
	value text NOT NULL
);
