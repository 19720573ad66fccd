-- Users, identities, role assignments and secrets are small documents kept
-- by kind and key; the audit log is append-only and read newest first.
CREATE TABLE objects (
	kind text NOT NULL,
	key  text NOT NULL,
	doc  jsonb NOT NULL,
	PRIMARY KEY (kind, key)
);

CREATE TABLE audit (
	seq    bigserial PRIMARY KEY,
	at     timestamptz NOT NULL,
	"user" text NOT NULL,
	doc    jsonb NOT NULL
);
CREATE INDEX audit_by_user ON audit ("user", seq);
