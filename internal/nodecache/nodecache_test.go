package nodecache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestEvictions(t *testing.T) {
	tests := []struct {
		name    string
		entries []Entry
		limit   int64
		want    []string
	}{
		{name: "within the limit", entries: []Entry{{Name: "a", Size: 5, LastUse: 1}, {Name: "b", Size: 5, LastUse: 2}}, limit: 10},
		{name: "least recently used first", limit: 10, want: []string{"b"},
			entries: []Entry{{Name: "a", Size: 5, LastUse: 3}, {Name: "b", Size: 5, LastUse: 1}, {Name: "c", Size: 5, LastUse: 2}}},
		{name: "as many as needed", limit: 5, want: []string{"b", "c"},
			entries: []Entry{{Name: "a", Size: 5, LastUse: 3}, {Name: "b", Size: 5, LastUse: 1}, {Name: "c", Size: 5, LastUse: 2}}},
		{name: "never one in use", limit: 10, want: []string{"c"},
			entries: []Entry{{Name: "a", Size: 5, LastUse: 3}, {Name: "b", Size: 5, LastUse: 1, InUse: true}, {Name: "c", Size: 5, LastUse: 2}}},
		{name: "in use alone over the limit: the rest goes", limit: 4, want: []string{"a"},
			entries: []Entry{{Name: "a", Size: 1, LastUse: 1}, {Name: "big", Size: 9, LastUse: 2, InUse: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Evictions(tt.entries, tt.limit); !slices.Equal(got, tt.want) {
				t.Errorf("Evictions = %v, want %v", got, tt.want)
			}
		})
	}
}

// fillWith returns a fill that writes size bytes into data and counts calls.
func fillWith(size int, calls *atomic.Int64) func(context.Context, string) error {
	return func(_ context.Context, dir string) error {
		calls.Add(1)
		return os.WriteFile(filepath.Join(dir, "data"), []byte(strings.Repeat("x", size)), 0o644)
	}
}

func TestAcquireDownloadsOnceAndEvictsLRU(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Open(dir, 250)
	if err != nil {
		t.Fatal(err)
	}
	// Two jobs at once ask for the same input: one download.
	var calls atomic.Int64
	var wg sync.WaitGroup
	handles := make([]*Handle, 2)
	for i := range handles {
		wg.Go(func() {
			h, err := c.Acquire(ctx, "a", fillWith(100, &calls))
			if err != nil {
				t.Error(err)
				return
			}
			handles[i] = h
		})
	}
	wg.Wait()
	if calls.Load() != 1 || handles[0].Dir != handles[1].Dir {
		t.Fatalf("two jobs reading a: %d downloads, dirs %s %s", calls.Load(), handles[0].Dir, handles[1].Dir)
	}
	if s := c.Stats(); s.Misses != 1 || s.Hits != 1 || s.Bytes != 100 || s.Entries != 1 || s.LimitBytes != 250 {
		t.Errorf("stats after a twice: %+v", s)
	}
	b, err := c.Acquire(ctx, "b", fillWith(100, &calls))
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	// a is in use, b is not: c pushes the cache over 250 and b goes,
	// although a was used first.
	h, err := c.Acquire(ctx, "c", fillWith(100, &calls))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Errorf("b, least recently used and free, was not evicted: %v", err)
	}
	for _, d := range []string{handles[0].Dir, h.Dir} {
		if _, err := os.Stat(filepath.Join(d, "data")); err != nil {
			t.Errorf("an entry in use was evicted: %v", err)
		}
	}
	if s := c.Stats(); s.Evictions != 1 || s.Bytes != 200 || s.Entries != 2 {
		t.Errorf("stats after c: %+v", s)
	}
	// Bigger than the limit alone: made and used all the same, then
	// evicted with whatever else is free once released.
	big, err := c.Acquire(ctx, "big", fillWith(300, &calls))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(big.Dir, "data")); err != nil {
		t.Fatalf("an entry over the limit: %v", err)
	}
	handles[0].Release()
	handles[1].Release()
	if _, err := os.Stat(handles[0].Dir); !os.IsNotExist(err) {
		t.Errorf("a, released while the cache is over its limit, stayed")
	}
	big.Release()
	h.Release()
	if s := c.Stats(); s.Bytes > 250 {
		t.Errorf("after every release the cache holds %d bytes over its limit of 250: %+v", s.Bytes, s)
	}
}

func TestFailedFillAndReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Open(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("blob service unreachable")
	if _, err := c.Acquire(ctx, "x", func(_ context.Context, d string) error {
		os.WriteFile(filepath.Join(d, "partial"), []byte("half"), 0o644)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failed fill: %v", err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatalf("a failed fill left %d entries on disk", len(des))
	}
	var calls atomic.Int64
	for _, k := range []string{"old", "new"} {
		h, err := c.Acquire(ctx, k, fillWith(400, &calls))
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	// A node whose agent restarted keeps its cache, within a new limit:
	// the least recently used entry goes.
	c2, err := Open(dir, 500)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c2.Acquire(ctx, "new", fillWith(400, &calls))
	if err != nil || !h.Hit || calls.Load() != 2 {
		t.Fatalf("after reopening: hit %v, %d downloads, %v", h != nil && h.Hit, calls.Load(), err)
	}
	if s := c2.Stats(); s.Entries != 1 || s.Evictions != 1 {
		t.Errorf("reopened with a smaller limit: %+v", s)
	}
}
