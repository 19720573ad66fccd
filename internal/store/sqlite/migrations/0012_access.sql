-- Users, identities, role assignments and secrets are small documents kept
-- by kind and key; the audit log is append-only and read newest first.
CREATE TABLE objects (
	kind TEXT NOT NULL,
	key  TEXT NOT NULL,
	doc  TEXT NOT NULL,
	PRIMARY KEY (kind, key)
) STRICT;

CREATE TABLE audit (
	seq  INTEGER PRIMARY KEY AUTOINCREMENT,
	at   TEXT NOT NULL,
	user TEXT NOT NULL,
	doc  TEXT NOT NULL
) STRICT;
CREATE INDEX audit_by_user ON audit (user, seq);
