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

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestCheckpointsBesideTheWriter: commits that leave the log well short of
// the writer's automatic checkpoint (1,000 pages) still reach the database
// file soon after they pause: the store's own connection checkpoints them,
// so no commit of the writer has to.
func TestCheckpointsBesideTheWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s0 := fileSize(t, path)
	val := strings.Repeat("x", 2000)
	for i := range 150 { // about 300 KB, some 500 pages of log
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.PutSetting(ctx, fmt.Sprint("k", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(checkpointEvery + 10*time.Second)
	for {
		if fileSize(t, path)-s0 >= 250_000 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the database file grew by %d bytes after 300 KB of commits and a pause; want them checkpointed", fileSize(t, path)-s0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLogBoundedUnderSteadyWrites: under writes that never pause the
// writer's own automatic checkpoints keep starting the log over: 3,000
// commits, some 40 MB of log pages, leave a log of about 4 MB (more when
// a pause of this test let a background checkpoint run and hold the
// writer's back), not 40.
func TestLogBoundedUnderSteadyWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	val := strings.Repeat("x", 4000)
	for i := range 3000 {
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.PutSetting(ctx, fmt.Sprint("k", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	if n := fileSize(t, path+"-wal"); n > 20<<20 {
		t.Fatalf("the log holds %d bytes after 3,000 steady commits; want at most 20 MB (the writer's automatic checkpoints bound it)", n)
	}
}
