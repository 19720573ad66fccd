package server_test

// End-to-end test of the node cache: real agents, blobs in Azurite.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
	"github.com/tideml/tide/internal/config"
)

// TestNodeCacheForReal: on one node with a 4 KiB cache, two jobs reading
// the same blob folder download it once; a job reading two 3,000-byte
// inputs gets both although they exceed the limit (entries in use are
// never evicted), and when it ends the least recently used one goes; the
// node's details show the counters from its heartbeats.
func TestNodeCacheForReal(t *testing.T) {
	az := azuritetest.Start(t)
	part := strings.Repeat("x", 2999) + "\n"
	az.Container(t, "data", map[string]string{"a/part.csv": part, "b/part.csv": part})
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) {
		c.Locations[0].NodeCacheGB = 4096.0 / (1 << 30)
	})
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()
	if _, _, err := in.client.PutDatastore(ctx, "default", az.Datastore("blobs", "data")); err != nil {
		t.Fatal(err)
	}
	createCompute(t, in, "name: one-node\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	input := func(name, folder string) string {
		return fmt.Sprintf("  %s:\n    type: uri_folder\n    path: azureml://datastores/blobs/paths/%s\n", name, folder)
	}
	run := func(command string, inputs ...string) string {
		t.Helper()
		j := submit(t, in, "command: "+command+"\ncompute: one-node\ninputs:\n"+strings.Join(inputs, ""))
		j = waitJob(t, in, j.Name, 60*time.Second)
		text := logText(t, in, j.Name)
		if j.Status != api.JobCompleted {
			t.Fatalf("%s: %s (%s)\n%s", j.Name, j.Status, j.Error, text)
		}
		return text
	}
	const (
		downloaded = "1 files, 1 downloaded, 0 from the node's cache"
		cached     = "1 files, 0 downloaded, 1 from the node's cache"
	)
	steps := []struct {
		command string
		inputs  []string
		want    []string // in order of the inputs
	}{
		{"wc -c ${{inputs.a}}/part.csv", []string{input("a", "a")}, []string{downloaded}},
		{"wc -c ${{inputs.a}}/part.csv", []string{input("a", "a")}, []string{cached}},
		// 6,000 bytes in use on a 4,096-byte cache: both stay while the
		// job runs; then a, used before b, is evicted.
		{"wc -c ${{inputs.a}}/part.csv ${{inputs.b}}/part.csv", []string{input("a", "a"), input("b", "b")}, []string{cached, downloaded}},
		{"wc -c ${{inputs.b}}/part.csv", []string{input("b", "b")}, []string{cached}},
		{"wc -c ${{inputs.a}}/part.csv", []string{input("a", "a")}, []string{downloaded}},
	}
	for i, s := range steps {
		text := run(s.command, s.inputs...)
		var got []string
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, "from the node's cache") {
				got = append(got, l[strings.Index(l, ": ")+2:])
			}
		}
		if strings.Join(got, "|") != strings.Join(s.want, "|") || strings.Count(text, "3000 ") != len(s.inputs) {
			t.Errorf("step %d: cache lines %q, want %q; log:\n%s", i+1, got, s.want, text)
		}
	}
	// Hits: steps 2, 3 (a), 4; misses: 1, 3 (b), 5; evictions: a after
	// step 3, b during step 5 (a alone fits).
	want := api.NodeCache{Hits: 3, Misses: 3, Evictions: 2, Entries: 1, Bytes: 3000, LimitBytes: 4096}
	var last *api.NodeCache
	waitFor(t, "the node's cache counters", 10*time.Second, func() bool {
		ns, err := in.client.Nodes(ctx, "default", "one-node")
		if err != nil || len(ns) != 1 || ns[0].Cache == nil {
			return false
		}
		last = ns[0].Cache
		return *last == want
	})
	if last == nil || *last != want {
		t.Errorf("node cache %+v, want %+v", last, want)
	}
}

// TestHTTPInputsCachedForReal: on one node, an http(s) input whose answer
// names its version (ETag, Last-Modified) is downloaded once; a later job
// gets the cached copy and the body is not read (the web server counts
// the bodies it finished sending). A new version is downloaded again; an
// answer without a version is never cached.
func TestHTTPInputsCachedForReal(t *testing.T) {
	const size = 32 << 20 // more than socket buffers hold: an unread body is not a finished one
	body := map[string][]byte{`"v1"`: bytes.Repeat([]byte("1"), size), `"v2"`: bytes.Repeat([]byte("2"), size)}
	var mu sync.Mutex
	etag, sent := `"v1"`, map[string]int{}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tag := etag
		mu.Unlock()
		switch r.URL.Path {
		case "/data/versioned.bin":
			w.Header().Set("ETag", tag)
		case "/data/dated.bin":
			w.Header().Set("Last-Modified", "Wed, 25 Nov 2026 10:00:00 GMT")
		case "/data/plain.bin":
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(size))
		if _, err := w.Write(body[tag]); err == nil {
			mu.Lock()
			sent[r.URL.Path]++
			mu.Unlock()
		}
	}))
	defer web.Close()
	in, _ := newServer(t)
	createCompute(t, in, "name: one-node\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	run := func(file string) string {
		t.Helper()
		j := submit(t, in, "command: head -c 1 ${{inputs.f}}; echo; wc -c < ${{inputs.f}}\ncompute: one-node\ninputs:\n  f:\n    type: uri_file\n    path: "+web.URL+"/data/"+file+"\n")
		j = waitJob(t, in, j.Name, 90*time.Second)
		text := logText(t, in, j.Name)
		if j.Status != api.JobCompleted || !strings.Contains(text, fmt.Sprint(size)) {
			t.Fatalf("%s: %s (%s)\n%s", j.Name, j.Status, j.Error, text)
		}
		return text
	}
	steps := []struct {
		file, first string
		cached      bool
		sent        int // bodies of file finished after the step
		bump        bool
	}{
		{file: "versioned.bin", first: "1", sent: 1},
		{file: "versioned.bin", first: "1", cached: true, sent: 1},
		{file: "versioned.bin", first: "2", sent: 2, bump: true}, // a new ETag
		{file: "versioned.bin", first: "2", cached: true, sent: 2},
		{file: "dated.bin", first: "2", sent: 1},
		{file: "dated.bin", first: "2", cached: true, sent: 1},
		{file: "plain.bin", first: "2", sent: 1},
		{file: "plain.bin", first: "2", sent: 2},
	}
	for i, s := range steps {
		if s.bump {
			mu.Lock()
			etag = `"v2"`
			mu.Unlock()
		}
		text := run(s.file)
		mu.Lock()
		n := sent["/data/"+s.file]
		mu.Unlock()
		if got := strings.Contains(text, "from the node's cache"); got != s.cached || n != s.sent || !strings.Contains(text, "\n"+s.first+"\n") {
			t.Errorf("step %d (%s): cached %v, bodies sent %d; want cached %v, %d, content %s:\n%s", i+1, s.file, got, n, s.cached, s.sent, s.first, text)
		}
	}
}

// TestListingReusedWithAttributeCacheTTL: a blob folder is listed for
// every job, so a blob added between two jobs is seen by the second;
// a job setting Azure's DATASET_MOUNT_ATTRIBUTE_CACHE_TTL accepts the
// node's listing of that age instead (the added blob is not in it, and
// the log says how old the listing is); a listing older than the TTL is
// made again.
func TestListingReusedWithAttributeCacheTTL(t *testing.T) {
	az := azuritetest.Start(t)
	st := az.Container(t, "data", map[string]string{"a/part.csv": "one\n"})
	in, _ := newServer(t)
	ctx := context.Background()
	if _, _, err := in.client.PutDatastore(ctx, "default", az.Datastore("blobs", "data")); err != nil {
		t.Fatal(err)
	}
	createCompute(t, in, "name: one-node\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	run := func(ttl string) string {
		t.Helper()
		env := ""
		if ttl != "" {
			env = "environment_variables:\n  DATASET_MOUNT_ATTRIBUTE_CACHE_TTL: \"" + ttl + "\"\n"
		}
		j := submit(t, in, "command: ls ${{inputs.a}}\ncompute: one-node\n"+env+"inputs:\n  a:\n    type: uri_folder\n    path: azureml://datastores/blobs/paths/a\n")
		j = waitJob(t, in, j.Name, 60*time.Second)
		text := logText(t, in, j.Name)
		if j.Status != api.JobCompleted {
			t.Fatalf("%s: %s (%s)\n%s", j.Name, j.Status, j.Error, text)
		}
		return text
	}
	run("")
	if err := st.UploadBytes(ctx, "a/new.csv", []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ttl          string
		sleep        time.Duration
		seesNew, old bool
	}{
		{ttl: "600000", old: true},                // the listing of the first job, 600 s allowed
		{ttl: "", seesNew: true},                  // no TTL: listed again
		{ttl: "600000", seesNew: true, old: true}, // the latest listing is the second one
	}
	for i, s := range steps {
		text := run(s.ttl)
		if got := strings.Contains(text, "new.csv"); got != s.seesNew {
			t.Errorf("step %d (TTL %q): new.csv listed %v, want %v:\n%s", i+1, s.ttl, got, s.seesNew, text)
		}
		if got := strings.Contains(text, "ago (DATASET_MOUNT_ATTRIBUTE_CACHE_TTL="); got != s.old {
			t.Errorf("step %d (TTL %q): listing reused %v, want %v:\n%s", i+1, s.ttl, got, s.old, text)
		}
	}
	if err := st.UploadBytes(ctx, "a/third.csv", []byte("three\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if text := run("10"); !strings.Contains(text, "third.csv") || strings.Contains(text, "ago (DATASET") {
		t.Errorf("a listing older than the TTL was reused:\n%s", text)
	}
}
