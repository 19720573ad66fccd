package agent

import (
	"context"
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
		return j.fetchBlobs(ctx, st, rel, in, dst)
	}
	return placed{}, fmt.Errorf("datastore %s has type %s, which nodes cannot read", name, ds.Type)
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
		return copyTree(src, dst, false)
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

// copyTree copies the folders and files (with their modes) under src into
// dst, replacing files of the same name (a job rerun writes its outputs
// again). With links, links are copied as links (those of a snapshot,
// which archive.Extract checked); else skipped (a job's outputs).
func copyTree(src, dst string, links bool) error {
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
		case d.Type()&fs.ModeSymlink != 0 && links:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			_ = os.Remove(out)
			return os.Symlink(target, out)
		case !d.Type().IsRegular():
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := copyFile(p, out); err != nil {
			return err
		}
		return os.Chmod(out, info.Mode().Perm())
	})
}
