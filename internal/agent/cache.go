package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
	"github.com/tideml/tide/internal/azureblob"
)

// fromCache gives the job the node cache's entry for key, made by fill
// when missing. For ro_mount where the runtime binds read-only, the entry
// itself is bound at dst and held until the job ends; otherwise it is
// copied into dst and let go. file is the file within the entry that the
// input names ("" for the whole folder).
func (j *job) fromCache(ctx context.Context, in api.JobInput, key, dst, file string, fill func(ctx context.Context, dir string) error) (placed, bool, error) {
	h, err := j.a.cache.Acquire(ctx, key, fill)
	if err != nil {
		return placed{}, false, err
	}
	src, target := h.Dir, dst
	if file != "" {
		src, target = filepath.Join(h.Dir, file), filepath.Join(dst, file)
	}
	if in.Mode == "ro_mount" && j.bindsReadOnly() {
		j.held = append(j.held, h)
		if file != "" {
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return placed{}, h.Hit, err
			}
			if err := os.WriteFile(target, nil, 0o444); err != nil {
				return placed{}, h.Hit, err
			}
		}
		return placed{path: target, bind: &runtime.Bind{Source: src, Target: target}}, h.Hit, nil
	}
	defer h.Release()
	if err := copyTree(h.Dir, dst, true); err != nil {
		return placed{}, h.Hit, fmt.Errorf("copying from the node's cache: %w", err)
	}
	return placed{path: target}, h.Hit, nil
}

// inputsDir holds the job's inputs on this node: copies, and the mount
// points of read-only binds.
func (j *job) inputsDir() string {
	return filepath.Join(j.a.cfg.Dir, "inputs", j.as.Workspace, j.as.Job, fmt.Sprint(j.as.Attempt))
}

// releaseInputs runs when the job's processes have ended: it deletes the
// job's input copies (the binds died with the processes' mount
// namespace or container) and lets the node cache evict the entries the
// job held.
func (j *job) releaseInputs() {
	if err := removeTree(j.inputsDir()); err != nil {
		j.log.Warn("deleting the job's inputs", slog.Any("error", err))
	}
	_ = os.Remove(filepath.Dir(j.inputsDir())) // the job's folder, once no attempt is left
	for _, h := range j.held {
		h.Release()
	}
	j.held = nil
}

// fetchCode unpacks the job's code snapshot as its working folder, from
// the node cache: a later job with the same code does not download it.
func (j *job) fetchCode(ctx context.Context) error {
	h, err := j.a.cache.Acquire(ctx, snapshotKey(j.as.Code), func(ctx context.Context, dir string) error {
		return j.fetchBlob(ctx, j.as.Code, dir)
	})
	if err != nil {
		return err
	}
	defer h.Release()
	if h.Hit {
		j.logs.add("tide", "code snapshot "+j.as.Code[:12]+": from the node's cache")
	} else {
		j.logs.add("tide", "code snapshot "+j.as.Code[:12]+": downloaded")
	}
	return copyTree(h.Dir, j.dir, true)
}

// snapshotKey is the node cache's key of a server snapshot, for code and
// data alike (the same digest unpacks to the same files).
func snapshotKey(digest string) string { return "snapshot\x00" + digest }

// fetchSnapshot gives the job a data snapshot of the server (blob:HEX,
// optionally /FILE), through the node cache: a snapshot is named by its
// content, so its entry never goes stale.
func (j *job) fetchSnapshot(ctx context.Context, in api.JobInput, dst string) (placed, error) {
	digest, file, _ := api.ParseBlobRef(in.Path)
	if in.Type == api.InputURIFile {
		file = filepath.FromSlash(path.Clean("/" + file)[1:])
	} else {
		file = ""
	}
	pl, hit, err := j.fromCache(ctx, in, snapshotKey(digest), dst, file, func(ctx context.Context, dir string) error {
		return j.fetchBlob(ctx, digest, dir)
	})
	if err == nil && hit {
		j.logs.add("tide", fmt.Sprintf("snapshot %s: from the node's cache", digest[:12]))
	}
	return pl, err
}

// fetchBlobs gives the job the blob rel (uri_file) or every blob under the
// folder rel (uri_folder) of a blob datastore, through the node cache: the
// entry's key names the blobs and their versions (MD5 or etag), so a
// changed blob is a new entry. Blobs without a version are downloaded
// into dst, uncached.
func (j *job) fetchBlobs(ctx context.Context, st *azureblob.Store, rel string, in api.JobInput, dst string) (placed, error) {
	var objs []azureblob.Object
	file := ""
	if in.Type == api.InputURIFile {
		if rel == "" {
			return placed{}, fmt.Errorf("a uri_file input needs the path of a blob, not the whole container")
		}
		o, err := st.Stat(ctx, rel)
		if err != nil {
			return placed{}, err
		}
		file = path.Base(rel)
		o.Name = file
		objs = []azureblob.Object{o}
	} else {
		ttl, err := api.AttributeCacheTTL(j.as.Env)
		if err != nil {
			return placed{}, err
		}
		var age time.Duration
		if objs, age, err = j.a.listings.list(ctx, st, rel, ttl); err != nil {
			return placed{}, err
		}
		if age > 0 {
			j.logs.add("tide", fmt.Sprintf("%s: listed %s ago (%s=%d)", st.URL(rel), age.Round(time.Millisecond), api.AttributeCacheTTLVar, ttl.Milliseconds()))
		}
		if len(objs) == 0 {
			if _, err := st.Stat(ctx, rel); err == nil {
				return placed{}, fmt.Errorf("%s is a blob, not a folder; use type: uri_file", st.URL(rel))
			}
			return placed{}, fmt.Errorf("no blobs under %s; check the path", st.URL(rel))
		}
	}
	download := func(ctx context.Context, dir string) error {
		for _, o := range objs {
			src := rel
			if file == "" && rel != "" {
				src = rel + "/" + o.Name
			} else if file == "" {
				src = o.Name
			}
			// DownloadFile renames a complete temporary file into
			// place: a partial blob is never used.
			if _, err := st.DownloadFile(ctx, src, filepath.Join(dir, filepath.FromSlash(o.Name))); err != nil {
				return err
			}
		}
		return nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", st.URL(rel), in.Type)
	cacheable := true
	for _, o := range objs {
		fmt.Fprintf(h, "%s\x00%s\x00", o.Name, o.Version)
		cacheable = cacheable && o.Version != ""
	}
	n := len(objs)
	if !cacheable {
		if err := download(ctx, dst); err != nil {
			return placed{}, err
		}
		j.logs.add("tide", fmt.Sprintf("%s: %d files, %d downloaded, 0 from the node's cache (blobs without MD5 or etag are not cached)", st.URL(rel), n, n))
		return placed{path: filepath.Join(dst, file)}, nil
	}
	pl, hit, err := j.fromCache(ctx, in, "azure_blob\x00"+hex.EncodeToString(h.Sum(nil)), dst, file, download)
	if err != nil {
		return placed{}, err
	}
	if hit {
		j.logs.add("tide", fmt.Sprintf("%s: %d files, 0 downloaded, %d from the node's cache", st.URL(rel), n, n))
	} else {
		j.logs.add("tide", fmt.Sprintf("%s: %d files, %d downloaded, 0 from the node's cache", st.URL(rel), n, n))
	}
	return pl, nil
}
