package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/blob"
	"github.com/tideml/tide/internal/snapshot"
)

// stepOutputs implements service.StepOutputs on the server's artifact
// folders (where agents upload each job's outputs/) and its blob store.
type stepOutputs struct {
	dataDir string
	blobs   *blob.Store
}

func (o stepOutputs) dir(ws, job, output string) string {
	return filepath.Join(o.dataDir, "artifacts", ws, job, "outputs", output)
}

// PackOutput implements service.StepOutputs.
func (o stepOutputs) PackOutput(ctx context.Context, ws, job, output string, file bool) (string, error) {
	src := o.dir(ws, job, output)
	// The agent uploads every declared output folder, empty or not, so a
	// missing one means the job's artifacts are gone: never hand on an
	// empty folder in its place.
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("job %s kept no output %s (its artifacts are missing); run the step again with settings.force_rerun: true", job, output)
	}
	name := ""
	if file {
		files, err := regularFiles(src)
		if err != nil {
			return "", err
		}
		if len(files) != 1 {
			return "", fmt.Errorf("a uri_file input needs an output holding one file; job %s wrote %d file(s) to outputs/%s", job, len(files), output)
		}
		src, name = filepath.Join(src, files[0]), filepath.Base(files[0])
	}
	snap, err := snapshot.Pack(src)
	if err != nil {
		return "", err
	}
	defer snap.Remove()
	if !o.blobs.Has(snap.Digest) {
		f, err := os.Open(snap.Path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if err := o.blobs.Put(snap.Digest, f); err != nil {
			return "", fmt.Errorf("storing output %s of job %s: %w", output, job, err)
		}
	}
	return api.BlobRef(snap.Digest, name), nil
}

// CopyOutput implements service.StepOutputs.
func (o stepOutputs) CopyOutput(ctx context.Context, ws, job, output, toJob, to string) error {
	src, dst := o.dir(ws, job, output), o.dir(ws, toJob, to)
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		return os.MkdirAll(dst, 0o755)
	}
	// os.CopyFS refuses symbolic links, which the pipeline's error then
	// names: its outputs would point outside themselves.
	return os.CopyFS(dst, os.DirFS(src))
}

// regularFiles lists the regular files under dir, relative to it.
func regularFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}
