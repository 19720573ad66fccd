package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob"
	"github.com/tideml/tide/internal/spec"
)

// datastore asks the server for a datastore of the job's workspace, with
// the credentials the node needs to read or write it.
func (j *job) datastore(ctx context.Context, name string) (*api.Datastore, error) {
	var ds api.Datastore
	p := "/v1/agent/workspaces/" + url.PathEscape(j.as.Workspace) + "/datastores/" + url.PathEscape(name)
	req, err := j.a.client.newRequest(ctx, http.MethodGet, p, nil, "")
	if err == nil {
		err = j.a.client.send(req, &ds)
	}
	if err != nil {
		return nil, fmt.Errorf("looking up datastore %s: %w", name, err)
	}
	return &ds, nil
}

// fetchDatastore puts rel of a datastore into dst (a local datastore's
// folder is bound or copied, see placeLocal) and says where the job sees it.
func (j *job) fetchDatastore(ctx context.Context, in api.JobInput, dst string) (placed, error) {
	name, rel, problem := spec.ParseDatastorePath(in.Path)
	if problem != "" {
		return placed{}, fmt.Errorf("%s", problem)
	}
	ds, err := j.datastore(ctx, name)
	if err != nil {
		return placed{}, err
	}
	switch ds.Type {
	case api.DatastoreLocal:
		if !filepath.IsAbs(ds.Path) {
			return placed{}, fmt.Errorf("datastore %s: path %q is not absolute", name, ds.Path)
		}
		return j.placeLocal(filepath.Join(ds.Path, filepath.FromSlash(rel)), dst, in)
	case api.DatastoreAzureBlob:
		st, err := azureblob.New(ds)
		if err != nil {
			return placed{}, err
		}
		c := blobCache{dir: filepath.Join(j.a.cfg.Dir, "cache", "blobs"), st: st}
		out, err := c.fetch(ctx, rel, dst, in.Type == api.InputURIFile)
		if err == nil {
			j.logs.add("tide", fmt.Sprintf("%s: %d files, %d downloaded, %d from the node's cache", st.URL(rel), c.hits+c.misses, c.misses, c.hits))
		}
		return placed{path: out}, err
	}
	return placed{}, fmt.Errorf("datastore %s has type %s, which nodes cannot read", name, ds.Type)
}

// blobCache keeps the blobs a node downloaded, named by the container,
// the blob and its version (MD5 or etag), so a later job that reads the
// same unchanged blob copies it from the node's disk instead of the
// network. (The cache is not bounded yet.)
type blobCache struct {
	dir          string
	st           *azureblob.Store
	hits, misses int
}

// fetch puts the blob rel (uri_file) or every blob under the folder rel
// (uri_folder) into dst, through the cache.
func (c *blobCache) fetch(ctx context.Context, rel, dst string, isFile bool) (string, error) {
	if isFile {
		if rel == "" {
			return "", fmt.Errorf("a uri_file input needs the path of a blob, not the whole container")
		}
		o, err := c.st.Stat(ctx, rel)
		if err != nil {
			return "", err
		}
		out := filepath.Join(dst, filepath.Base(filepath.FromSlash(rel)))
		return out, c.get(ctx, rel, o.Version, out)
	}
	objs, err := c.st.List(ctx, rel)
	if err != nil {
		return "", err
	}
	if len(objs) == 0 {
		if _, err := c.st.Stat(ctx, rel); err == nil {
			return "", fmt.Errorf("%s is a blob, not a folder; use type: uri_file", c.st.URL(rel))
		}
		return "", fmt.Errorf("no blobs under %s; check the path", c.st.URL(rel))
	}
	for _, o := range objs {
		src := o.Name
		if rel != "" {
			src = rel + "/" + o.Name
		}
		if err := c.get(ctx, src, o.Version, filepath.Join(dst, filepath.FromSlash(o.Name))); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// get copies blob p at version into out, downloading it into the cache
// first when the cache lacks it. A blob without a version is not cached.
func (c *blobCache) get(ctx context.Context, p, version, out string) error {
	if version == "" {
		c.misses++
		_, err := c.st.DownloadFile(ctx, p, out)
		return err
	}
	sum := sha256.Sum256([]byte(c.st.URL(p) + "\x00" + version))
	cached := filepath.Join(c.dir, hex.EncodeToString(sum[:]))
	if _, err := os.Stat(cached); err == nil {
		c.hits++
	} else {
		c.misses++
		// DownloadFile renames a complete temporary file into place, so
		// the cache never holds a partial blob.
		if _, err := c.st.DownloadFile(ctx, p, cached); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return copyFile(cached, out)
}

// uploadOutputs writes each output that has a datastore path there: the
// folder outputs/NAME below the path, or for a uri_file output the file
// outputs/NAME/NAME as the path itself.
func (j *job) uploadOutputs(ctx context.Context) error {
	names := make([]string, 0, len(j.as.OutputPaths))
	for name := range j.as.OutputPaths {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := j.as.OutputPaths[name]
		if err := j.uploadOutput(ctx, name, p); err != nil {
			return fmt.Errorf("outputs.%s: writing to %s: %w", name, p, err)
		}
	}
	return nil
}

func (j *job) uploadOutput(ctx context.Context, name, p string) error {
	dsName, rel, problem := spec.ParseDatastorePath(p)
	if problem != "" {
		return fmt.Errorf("%s", problem)
	}
	ds, err := j.datastore(ctx, dsName)
	if err != nil {
		return err
	}
	src := filepath.Join(j.outputsDir, name)
	isFile := slices.Contains(j.as.FileOutputs, name)
	if isFile {
		src = filepath.Join(src, name)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("the job wrote no file %s", src)
		}
	}
	switch ds.Type {
	case api.DatastoreLocal:
		dst := filepath.Join(ds.Path, filepath.FromSlash(rel))
		if isFile {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return copyFile(src, dst)
		}
		return copyTree(src, dst)
	case api.DatastoreAzureBlob:
		st, err := azureblob.New(ds)
		if err != nil {
			return err
		}
		if isFile {
			return st.UploadFile(ctx, src, rel)
		}
		n, err := st.UploadTree(ctx, src, rel)
		if err == nil {
			j.logs.add("tide", fmt.Sprintf("outputs.%s: uploaded %d files to %s", name, n, st.URL(rel)))
		}
		return err
	}
	return fmt.Errorf("datastore %s has type %s, which nodes cannot write", dsName, ds.Type)
}

// copyTree copies the files under src into dst, replacing files of the
// same name (a job rerun writes its outputs again).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type().IsRegular():
			return copyFile(p, out)
		}
		return nil
	})
}
