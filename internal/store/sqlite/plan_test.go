package sqlite

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// TestFeedQueriesUseTheirIndexes checks that the controller's change feeds,
// liveness and a batch of heartbeats read the rows they want through their
// index: ordered by
// another index, SQLite scanned every job or node each turn, a turn's
// main cost with 100,000 jobs stored.
func TestFeedQueriesUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for q, index := range map[string]string{
		changedJobsQuery:     "jobs_by_etag",
		changedComputesQuery: "computes_by_etag",
		changedNodesQuery:    "nodes_by_rev",
		nodesSeenBeforeQuery: "nodes_by_last_seen",
		nodeBeatsQuery:       "sqlite_autoindex_nodes_1 (id=?)",
		putNodeBeatsQuery:    "sqlite_autoindex_nodes_1 (id=?)",
		// A turn's pending reasons: each job by its key, not every
		// queued one.
		setPendingReasonsQuery: "sqlite_autoindex_jobs_2 (workspace=? AND name=?)",
	} {
		args := []any{0}
		switch {
		case q == setPendingReasonsQuery:
			args = []any{0, "[]", "Queued"}
		case strings.Contains(q, "json_each"):
			args = []any{"[]"}
		}
		rows, err := s.readers.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, "SEARCH") || !strings.Contains(p, index) {
			t.Errorf("%s: plan %q, want a search of %s", q, p, index)
		}
	}
}
