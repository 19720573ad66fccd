package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/store"
)

// TestCheckpointsOffTheWriter: the writer's commits never copy the log
// into the database file themselves (wal_autocheckpoint is 0 on the writer
// connection); the store's own checkpointer does, within about
// checkpointEvery of the commits: 2 MB of writes reach the database file.
func TestCheckpointsOffTheWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var auto int
	if err := s.writer.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Errorf("the writer checkpoints every %d pages in its commits; want 0 (checkpoint.go does)", auto)
	}
	val := strings.Repeat("x", 4000)
	for i := range 500 {
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.PutSetting(ctx, fmt.Sprint("k", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(checkpointEvery + 10*time.Second)
	for {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() >= 2_000_000 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the database file holds %d bytes after 2 MB of commits; want them checkpointed", fi.Size())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
