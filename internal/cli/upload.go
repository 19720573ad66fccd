package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/snapshot"
	"github.com/tideml/tide/internal/spec"
)

// uploadTimeout bounds one snapshot upload.
const uploadTimeout = 30 * time.Minute

// uploadData uploads the job's code folder and its data inputs that are
// local paths (relative to the job file's folder, as in Azure ML), and
// points the job at the uploaded snapshots. A snapshot the server already
// has (same SHA-256) is not sent again.
func (r *run) uploadData(ctx context.Context, cl *api.Client, file string, j *api.Job) error {
	base := fileBase(file)
	code, err := r.uploadCode(ctx, cl, base, "code", j.Code)
	if err != nil {
		return err
	}
	j.Code = code
	if err := r.uploadBuild(ctx, cl, base, "environment.build.path", j.Environment); err != nil {
		return err
	}
	return r.uploadInputs(ctx, cl, base, "inputs.", j.Inputs)
}

// uploadBuild uploads an inline environment's Docker build context and
// points it at the snapshot, so a node on any host can build it.
func (r *run) uploadBuild(ctx context.Context, cl *api.Client, base, field string, e *api.JobEnvironment) error {
	if e == nil || e.Build == nil {
		return nil
	}
	ref, err := r.uploadBuildPath(ctx, cl, base, field, e.Build.Path)
	if err != nil {
		return err
	}
	e.Build.Path = ref
	return nil
}

// uploadBuildPath uploads a build context folder unless it is a snapshot
// reference already; it must hold a Dockerfile.
func (r *run) uploadBuildPath(ctx context.Context, cl *api.Client, base, field, p string) (string, error) {
	if _, _, ok := api.ParseBlobRef(p); ok {
		return p, nil
	}
	dir := p
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(base, p)
	}
	if _, err := os.Stat(filepath.Join(dir, "Dockerfile")); err != nil {
		return "", usagef("%s: %s holds no Dockerfile (the build context is the folder with the Dockerfile, relative to the YAML file)", field, dir)
	}
	return r.upload(ctx, cl, base, field, p, true)
}

// fileBase is the folder relative paths in a file are read from.
func fileBase(file string) string {
	if file == "-" || file == "" {
		return "."
	}
	return filepath.Dir(file)
}

// uploadCode uploads a local code folder and returns its blob reference;
// other references are returned as they are.
func (r *run) uploadCode(ctx context.Context, cl *api.Client, base, field, code string) (string, error) {
	if code == "" {
		return "", nil
	}
	if kind, _ := spec.ClassifyDataPath(code); kind != spec.PathLocal {
		return code, nil
	}
	return r.upload(ctx, cl, base, field, code, true)
}

// uploadInputs uploads the data inputs that are local paths, in place;
// prefix names their fields ("inputs.", "jobs.train.inputs.").
func (r *run) uploadInputs(ctx context.Context, cl *api.Client, base, prefix string, inputs map[string]api.JobInput) error {
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		in := inputs[name]
		if !api.IsDataType(in.Type) {
			continue
		}
		if kind, _ := spec.ClassifyDataPath(in.Path); kind != spec.PathLocal {
			continue
		}
		ref, err := r.upload(ctx, cl, base, prefix+name+".path", in.Path, api.IsFolderType(in.Type))
		if err != nil {
			return err
		}
		in.Path = ref
		inputs[name] = in
	}
	return nil
}

// upload packs one local folder (or file) and sends it unless the server
// has it; it returns the blob reference for the job.
func (r *run) upload(ctx context.Context, cl *api.Client, base, field, p string, folder bool) (string, error) {
	src := p
	if !filepath.IsAbs(src) {
		src = filepath.Join(base, p)
	}
	info, err := os.Stat(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", usagef("%s: %s not found (paths are relative to the job file's folder, %s)", field, src, base)
	case err != nil:
		return "", usagef("%s: %v", field, err)
	case folder && !info.IsDir():
		return "", usagef("%s: %s is a file; use type: uri_file, or name its folder", field, src)
	case !folder && info.IsDir() && field != "code":
		return "", usagef("%s: %s is a folder; use type: uri_folder", field, src)
	case field == "code" && !info.IsDir():
		return "", usagef("code: %s is a file; code names the folder the job runs in", src)
	}
	snap, err := snapshot.Pack(src)
	if err != nil {
		return "", usagef("%s: %v", field, err)
	}
	defer snap.Remove()
	file := ""
	if !info.IsDir() {
		file = filepath.Base(src)
	}
	ref := api.BlobRef(snap.Digest, file)
	uctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	has, err := cl.HasBlob(uctx, snap.Digest)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	what := fmt.Sprintf("%s %s (%s, %s)", field, p, plural(snap.Files, "file"), bytesize(snap.Bytes))
	if has {
		fmt.Fprintf(r.app.Stderr, "Using %s: already on the server.\n", what)
		return ref, nil
	}
	fmt.Fprintf(r.app.Stderr, "Uploading %s as %s.\n", what, bytesize(snap.Size))
	f, err := os.Open(snap.Path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := cl.PutBlob(uctx, snap.Digest, f, snap.Size); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return ref, nil
}
