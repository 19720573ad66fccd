// Package examples holds tide's example jobs as Azure ML files: a compute
// file (cpu-cluster.yml), environment files (environments/), and one folder
// per job with its job file (job.yml) and code folder (src/). They are
// plain files to use with the CLI, and embedded here so that `tide demo`
// and the end-to-end tests run exactly these files.
//
//	sklearn-digits  a scikit-learn SVM on the digits data set; metrics to ./outputs
//	pytorch-ddp     PyTorch DDP (gloo, CPU) on 2 nodes; accuracy from rank 0, checkpoint, resume
//	mpi-hello       an MPI hello world across 2 nodes (mpirun from node 0)
//
// They run on the host with Debian's python3-sklearn, python3-torch and
// openmpi-bin; the environments name /usr/bin/python3 as their interpreter.
package examples

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/snapshot"
	"github.com/tideml/tide/internal/spec"
)

// Files are the example files, as in this folder.
//
//go:embed cpu-cluster.yml environments/*.yml sklearn-digits pytorch-ddp mpi-hello
var Files embed.FS

// Names of the example jobs (their folders).
const (
	SklearnDigits = "sklearn-digits"
	PyTorchDDP    = "pytorch-ddp"
	MPIHello      = "mpi-hello"
)

// Compute returns the examples' cluster.
func Compute() (*api.Compute, error) {
	b, err := Files.ReadFile("cpu-cluster.yml")
	if err != nil {
		return nil, err
	}
	return spec.ParseCompute("examples/cpu-cluster.yml", b, nil)
}

// Environments returns the examples' environments.
func Environments() ([]*api.Environment, error) {
	entries, err := fs.ReadDir(Files, "environments")
	if err != nil {
		return nil, err
	}
	var out []*api.Environment
	for _, e := range entries {
		name := path.Join("environments", e.Name())
		b, err := Files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		env, conda, err := spec.ParseEnvironment("examples/"+name, b, nil)
		if err != nil {
			return nil, err
		}
		if conda != "" {
			return nil, fmt.Errorf("examples/%s: conda_file paths are not embedded; inline the conda file", name)
		}
		out = append(out, env)
	}
	return out, nil
}

// Job returns an example's job (name is one of SklearnDigits, PyTorchDDP,
// MPIHello).
func Job(name string) (*api.Job, error) {
	file := path.Join(name, "job.yml")
	b, err := Files.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("example %s: %w", name, err)
	}
	return spec.ParseJob("examples/"+file, b, nil)
}

// WriteTo copies the example files into dir.
func WriteTo(dir string) error {
	return fs.WalkDir(Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := Files.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o755)
	})
}

// UploadCode packs the job's code folder, resolved against exampleDir (a
// folder WriteTo wrote), uploads it unless the server has it, and points
// the job's code at the snapshot, as `tide job create` does for a job
// file. Programs that submit examples through the Go client (tide demo,
// tests) use it.
func UploadCode(ctx context.Context, c *api.Client, j *api.Job, exampleDir string) error {
	if j.Code == "" {
		return nil
	}
	snap, err := snapshot.Pack(filepath.Join(exampleDir, filepath.FromSlash(j.Code)))
	if err != nil {
		return fmt.Errorf("code: %w", err)
	}
	defer snap.Remove()
	has, err := c.HasBlob(ctx, snap.Digest)
	if err != nil {
		return fmt.Errorf("code: %w", err)
	}
	if !has {
		f, err := os.Open(snap.Path)
		if err != nil {
			return fmt.Errorf("code: %w", err)
		}
		defer f.Close()
		if err := c.PutBlob(ctx, snap.Digest, f, snap.Size); err != nil {
			return fmt.Errorf("code: %w", err)
		}
	}
	j.Code = api.BlobRef(snap.Digest, "")
	return nil
}
