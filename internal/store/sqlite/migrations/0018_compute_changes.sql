-- The controller follows compute writes as it follows job (0013) and node
-- (0017) writes: a compute's etag is the revision of its last write, so
-- ChangedComputes reads the computes written after a revision instead of
-- decoding every compute twice a turn.
CREATE INDEX computes_by_etag ON computes (etag);
