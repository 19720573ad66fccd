package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
	"github.com/tideml/tide/internal/nodecache"
)

// BenchmarkCachedInputStart is the cached-blob half of runtime's
// BenchmarkInputStart: on a warm node, the time from a job's ro_mount
// input to its command having listed it, for a 1 GiB uri_folder of 1,000
// files: from a local datastore (bound where it is) and from a blob
// datastore already in the node cache (the container listed, to learn the
// blobs' versions, then the cache entry bound), and from the same blob
// folder when the job accepts the node's latest listing of it
// (DATASET_MOUNT_ATTRIBUTE_CACHE_TTL). The target is the cached blob within
// 2x of the local read.
func BenchmarkCachedInputStart(b *testing.B) {
	if !(runtime.Process{}).BindsReadOnly() {
		b.Skip("the process runtime binds read-only only as root")
	}
	ctx := context.Background()
	local := b.TempDir()
	az := azuritetest.Start(b)
	st := az.Container(b, "data", nil)
	part := bytes.Repeat([]byte{1}, 1<<20)
	for i := range 1000 {
		name := fmt.Sprintf("part-%04d.bin", i)
		if err := os.WriteFile(filepath.Join(local, name), part, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := st.UploadBytes(ctx, "folder/"+name, part); err != nil {
			b.Fatal(err)
		}
	}
	cache, err := nodecache.Open(b.TempDir(), 2<<30)
	if err != nil {
		b.Fatal(err)
	}
	a := &agent{cfg: Config{Runtime: runtime.Process{}}, cache: cache}
	in := api.JobInput{Type: api.InputURIFolder, Mode: "ro_mount"}
	var env map[string]string // the job's environment variables
	start := func(b *testing.B, place func(j *job, dst string) (placed, error)) {
		j := &job{a: a, as: api.Assignment{Workspace: "w", Job: "bench", Attempt: 1, Env: env}}
		j.logs = &shipper{j: j}
		dir := b.TempDir()
		dst := filepath.Join(dir, "input")
		if err := os.MkdirAll(dst, 0o755); err != nil {
			b.Fatal(err)
		}
		pl, err := place(j, dst)
		if err != nil || pl.bind == nil {
			b.Fatalf("placed %+v, %v; want a read-only bind", pl, err)
		}
		h, err := runtime.Process{}.Start(ctx, runtime.Spec{Command: "ls " + pl.path + " > /dev/null", Dir: dir, ReadOnly: []runtime.Bind{*pl.bind}})
		if err != nil {
			b.Fatal(err)
		}
		if code, err := h.Wait(); code != 0 || err != nil {
			b.Fatalf("exit %d, %v", code, err)
		}
		for _, h := range j.held {
			h.Release()
		}
	}
	b.Run("local datastore ro_mount", func(b *testing.B) {
		for b.Loop() {
			start(b, func(j *job, dst string) (placed, error) { return j.placeLocal(local, dst, in) })
		}
	})
	blob := func(j *job, dst string) (placed, error) { return j.fetchBlobs(ctx, st, "folder", in, dst) }
	start(b, blob) // the node is warm: the folder is in its cache
	if s := cache.Stats(); s.Misses != 1 || s.Bytes != 1000<<20 {
		b.Fatalf("cache after warming: %+v", s)
	}
	b.Run("cached blob ro_mount", func(b *testing.B) {
		for b.Loop() {
			start(b, blob)
		}
	})
	// A job that accepts a listing up to a minute old
	// (DATASET_MOUNT_ATTRIBUTE_CACHE_TTL) skips the listing.
	env = map[string]string{api.AttributeCacheTTLVar: "60000"}
	b.Run("cached blob ro_mount, listing reused", func(b *testing.B) {
		for b.Loop() {
			start(b, blob)
		}
	})
	env = nil
	// What the cached start spends asking the service for the blobs'
	// versions (the cache key), which a local datastore does not.
	b.Run("listing 1,000 blobs", func(b *testing.B) {
		for b.Loop() {
			if objs, err := st.List(ctx, "folder"); err != nil || len(objs) != 1000 {
				b.Fatalf("%d blobs, %v", len(objs), err)
			}
		}
	})
	if s := cache.Stats(); s.Misses != 1 {
		b.Fatalf("a cached run downloaded: %+v", s)
	}
}
