package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/blob"
	"github.com/tideml/tide/internal/filestore"
	"github.com/tideml/tide/internal/snapshot"
)

// stepOutputs implements service.StepOutputs on the jobs' artifacts in
// the server's files (where agents upload each job's outputs/) and its
// blob store.
type stepOutputs struct {
	files   filestore.Store
	blobs   *blob.Store
	scratch string // a local folder for outputs on their way to a blob
}

func outputName(ws, job, output string) string {
	return path.Join(artifactsName(ws, job), "outputs", output)
}

// PackOutput implements service.StepOutputs.
func (o stepOutputs) PackOutput(ctx context.Context, j *api.Job, output string, file bool) (string, error) {
	job, src := j.Name, outputName(j.Workspace, j.Name, output)
	// The agent uploads or reports every declared output folder, empty or
	// not, so a missing one means the job's artifacts are gone: never hand
	// on an empty folder in its place.
	if ok, err := o.files.Exists(ctx, src); err != nil || (!ok && !hasEmptyFolder(j, path.Join("outputs", output))) {
		return "", fmt.Errorf("job %s kept no output %s (its artifacts are missing from %s: %v); run the step again with settings.force_rerun: true", job, output, o.files, err)
	}
	files, err := jobFiles(ctx, o.files, j, path.Join("outputs", output))
	if err != nil {
		return "", err
	}
	name := ""
	if file && len(files) != 1 {
		return "", fmt.Errorf("a uri_file input needs an output holding one file; job %s wrote %d file(s) to outputs/%s", job, len(files), output)
	}
	dir, err := os.MkdirTemp(o.scratch, "output-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	for _, f := range files {
		if err := o.fetch(ctx, path.Join(src, f.Name), f, filepath.Join(dir, filepath.FromSlash(f.Name))); err != nil {
			return "", fmt.Errorf("reading output %s of job %s: %w", output, job, err)
		}
	}
	root := dir
	if file {
		root, name = filepath.Join(dir, filepath.FromSlash(files[0].Name)), path.Base(files[0].Name)
	}
	snap, err := snapshot.Pack(root)
	if err != nil {
		return "", err
	}
	defer snap.Remove()
	if !o.blobs.Has(ctx, snap.Digest) {
		f, err := os.Open(snap.Path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if err := o.blobs.Put(ctx, snap.Digest, f); err != nil {
			return "", fmt.Errorf("storing output %s of job %s: %w", output, job, err)
		}
	}
	return api.BlobRef(snap.Digest, name), nil
}

// fetch copies the stored file name (an empty file when f has no size
// and is not stored: one of the job's record) to the local file dst.
func (o stepOutputs) fetch(ctx context.Context, name string, f filestore.File, dst string) error {
	r, _, err := o.files.Open(ctx, name)
	if errors.Is(err, fs.ErrNotExist) && f.Size == 0 {
		r, err = io.NopCloser(strings.NewReader("")), nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// CopyOutput implements service.StepOutputs.
func (o stepOutputs) CopyOutput(ctx context.Context, j *api.Job, output, toJob, to string) error {
	src, dst := outputName(j.Workspace, j.Name, output), outputName(j.Workspace, toJob, to)
	if err := o.files.Delete(ctx, dst); err != nil {
		return err
	}
	if err := o.files.MakeFolder(ctx, dst); err != nil {
		return err
	}
	files, err := jobFiles(ctx, o.files, j, path.Join("outputs", output))
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := o.copy(ctx, path.Join(src, f.Name), f, path.Join(dst, f.Name)); err != nil {
			return fmt.Errorf("copying output %s of job %s: %w", output, j.Name, err)
		}
	}
	return nil
}

func (o stepOutputs) copy(ctx context.Context, from string, f filestore.File, to string) error {
	r, _, err := o.files.Open(ctx, from)
	if errors.Is(err, fs.ErrNotExist) && f.Size == 0 {
		return o.files.Put(ctx, to, strings.NewReader("")) // one of the job's record
	}
	if err != nil {
		return err
	}
	defer r.Close()
	return o.files.Put(ctx, to, r)
}
