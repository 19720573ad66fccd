// Package nodecache is a node's cache of downloaded data: input blobs of
// datastores and the server's data snapshots, kept on the node's disk so
// that later jobs on the node read them without downloading again.
//
// An entry is a folder named by the SHA-256 of its key, and a key names
// content (a snapshot's digest, or a blob's URL with its MD5 or etag), so
// an entry never goes stale. The cache is bounded: past its limit, the
// least recently used entries that no running job holds are deleted. An
// entry larger than the limit is still made and used; it goes when it is
// released. Jobs hold entries with Acquire until they end, because a job
// may see an entry itself (a read-only bind mount) rather than a copy.
package nodecache

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
)

// DefaultLimit is the cache's size limit when none is configured.
const DefaultLimit = 10 << 30

// Cache is one node's cache. Its methods are safe for concurrent use.
type Cache struct {
	dir   string
	limit int64

	mu      sync.Mutex
	entries map[string]*entry // by folder name
	filling map[string]chan struct{}
	seq     int64 // orders uses: higher is more recent
	stats   api.NodeCache
}

type entry struct {
	name string
	size int64
	used int64 // Cache.seq at the last use
	refs int
}

// Open opens the cache in dir (created if missing) with a limit in bytes
// (0: DefaultLimit). Entries left by an earlier agent are kept, their
// order of use taken from their folders' modification times; unfinished
// fills are deleted.
func Open(dir string, limit int64) (*Cache, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node cache %s: %w", dir, err)
	}
	c := &Cache{dir: dir, limit: limit, entries: map[string]*entry{}, filling: map[string]chan struct{}{}}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("node cache %s: %w", dir, err)
	}
	type found struct {
		e     *entry
		mtime time.Time
	}
	var old []found
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if strings.HasPrefix(de.Name(), ".") || !de.IsDir() {
			_ = os.RemoveAll(p) // a fill the agent did not finish
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		old = append(old, found{&entry{name: de.Name(), size: treeSize(p)}, info.ModTime()})
	}
	slices.SortFunc(old, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	for _, f := range old {
		c.seq++
		f.e.used = c.seq
		c.entries[f.e.name] = f.e
		c.stats.Bytes += f.e.size
	}
	c.stats.Entries = len(c.entries)
	c.evictLocked()
	return c, nil
}

// Stats returns the cache's counters and size.
func (c *Cache) Stats() api.NodeCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.LimitBytes = c.limit
	return s
}

// Handle is an entry held by a job; Release lets it be evicted again.
type Handle struct {
	// Dir is the entry's folder; nothing may write to it.
	Dir string
	// Hit says the entry was in the cache (or being filled by another job).
	Hit  bool
	c    *Cache
	name string
	once sync.Once
}

// Release gives the entry up; the cache may then evict it. It may be
// called more than once.
func (h *Handle) Release() {
	h.once.Do(func() {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		if e := h.c.entries[h.name]; e != nil {
			e.refs--
		}
		h.c.evictLocked()
	})
}

// Acquire returns the entry for key, holding it until Release. A missing
// entry is made by fill, which writes the content into the folder it is
// given; the folder becomes the entry only when fill succeeds, so a
// failed or interrupted download is never used. Two jobs asking for the
// same missing key at once download it once.
func (c *Cache) Acquire(ctx context.Context, key string, fill func(ctx context.Context, dir string) error) (*Handle, error) {
	sum := sha256.Sum256([]byte(key))
	name := hex.EncodeToString(sum[:])
	for {
		c.mu.Lock()
		if e := c.entries[name]; e != nil {
			c.seq++
			e.used, e.refs = c.seq, e.refs+1
			c.stats.Hits++
			c.mu.Unlock()
			now := time.Now()
			_ = os.Chtimes(filepath.Join(c.dir, name), now, now) // the order of use, for the next agent
			return &Handle{Dir: filepath.Join(c.dir, name), Hit: true, c: c, name: name}, nil
		}
		wait, busy := c.filling[name]
		if !busy {
			c.filling[name] = make(chan struct{})
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	size, err := c.fill(ctx, name, fill)
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.filling[name])
	delete(c.filling, name)
	if err != nil {
		return nil, err
	}
	c.seq++
	c.entries[name] = &entry{name: name, size: size, used: c.seq, refs: 1}
	c.stats.Misses++
	c.stats.Bytes += size
	c.stats.Entries = len(c.entries)
	c.evictLocked()
	return &Handle{Dir: filepath.Join(c.dir, name), c: c, name: name}, nil
}

// fill makes the entry name in a temporary folder and renames it into place.
func (c *Cache) fill(ctx context.Context, name string, fill func(ctx context.Context, dir string) error) (int64, error) {
	tmp, err := os.MkdirTemp(c.dir, ".fill-")
	if err != nil {
		return 0, fmt.Errorf("node cache: %w", err)
	}
	if err := fill(ctx, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return 0, err
	}
	if err := readableByAll(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("node cache: %w", err)
	}
	size := treeSize(tmp)
	if err := os.Rename(tmp, filepath.Join(c.dir, name)); err != nil {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("node cache: %w", err)
	}
	return size, nil
}

// evictLocked deletes what Evictions chooses; c.mu is held.
func (c *Cache) evictLocked() {
	es := make([]Entry, 0, len(c.entries))
	for _, e := range c.entries {
		es = append(es, Entry{Name: e.name, Size: e.size, LastUse: e.used, InUse: e.refs > 0})
	}
	for _, name := range Evictions(es, c.limit) {
		e := c.entries[name]
		// Renamed first, so a crash mid-delete leaves a dot folder that
		// Open removes, never a half entry.
		gone := filepath.Join(c.dir, ".evicted-"+name)
		if err := os.Rename(filepath.Join(c.dir, name), gone); err == nil {
			_ = os.RemoveAll(gone)
		}
		delete(c.entries, name)
		c.stats.Bytes -= e.size
		c.stats.Evictions++
	}
	c.stats.Entries = len(c.entries)
}

// Entry is what Evictions needs to know of a cache entry.
type Entry struct {
	Name    string
	Size    int64
	LastUse int64 // higher is more recent
	InUse   bool
}

// Evictions chooses the entries to delete so that the rest fit in limit:
// the least recently used first, never one in use. When the entries in
// use alone exceed the limit, every other entry goes and they stay.
func Evictions(entries []Entry, limit int64) []string {
	var total int64
	for _, e := range entries {
		total += e.Size
	}
	if total <= limit {
		return nil
	}
	lru := slices.Clone(entries)
	slices.SortFunc(lru, func(a, b Entry) int { return cmp.Compare(a.LastUse, b.LastUse) })
	var out []string
	for _, e := range lru {
		if total <= limit {
			break
		}
		if e.InUse {
			continue
		}
		out = append(out, e.Name)
		total -= e.Size
	}
	return out
}

// readableByAll lets every user read dir's files and pass its folders:
// jobs of any run_as user read entries (downloads are made 0600).
func readableByAll(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		add := fs.FileMode(0o444)
		if d.IsDir() {
			add = 0o555
		}
		return os.Chmod(p, info.Mode().Perm()|add)
	})
}

// treeSize adds up the sizes of the files under dir.
func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
