package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/archive"
	"github.com/tideml/tide/internal/filestore"
)

// artifactsName is the folder of the server's files that holds a job's
// artifacts: what its nodes uploaded of outputs/ and logs/.
func artifactsName(ws, job string) string { return path.Join("artifacts", ws, job) }

func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request) {
	ws, name := r.PathValue("workspace"), r.PathValue("name")
	j, err := s.svc.Job(r.Context(), ws, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	files, err := jobFiles(r.Context(), s.files, j, "")
	if err != nil {
		s.fail(w, r, fmt.Errorf("listing the artifacts of job %s in %s: %w", name, s.files, err))
		return
	}
	out := make([]api.Artifact, 0, len(files))
	for _, f := range files {
		out = append(out, api.Artifact{Path: f.Name, Size: f.Size})
	}
	writeJSON(w, 200, list(out))
}

// jobFiles lists the files of job j's artifacts below the folder dir
// ("" for all; "outputs/NAME" for an output), by path below it: those
// stored in files, and the empty ones its record keeps
// (api.Job.EmptyArtifacts), where no stored file has their name.
func jobFiles(ctx context.Context, files filestore.Store, j *api.Job, dir string) ([]filestore.File, error) {
	stored, err := files.List(ctx, path.Join(artifactsName(j.Workspace, j.Name), dir))
	if err != nil {
		return nil, err
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	n := len(stored)
	for _, e := range j.EmptyArtifacts {
		rel, ok := strings.CutPrefix(e, prefix)
		if !ok || rel == "" || strings.HasSuffix(rel, "/") || slices.ContainsFunc(stored[:n], func(f filestore.File) bool { return f.Name == rel }) {
			continue
		}
		stored = append(stored, filestore.File{Name: rel})
	}
	if len(stored) > n {
		slices.SortFunc(stored, func(a, b filestore.File) int { return strings.Compare(a.Name, b.Name) })
	}
	return stored, nil
}

// hasEmptyFolder reports whether job j's record keeps dir (a folder of its
// artifacts) or anything below it.
func hasEmptyFolder(j *api.Job, dir string) bool {
	return slices.ContainsFunc(j.EmptyArtifacts, func(e string) bool { return strings.HasPrefix(e, dir+"/") })
}

func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request) {
	ws, name := r.PathValue("workspace"), r.PathValue("name")
	j, err := s.svc.Job(r.Context(), ws, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rel := path.Clean("/" + r.PathValue("path"))[1:]
	var body io.ReadCloser
	var size int64
	err = fs.ErrNotExist
	if rel != "" {
		body, size, err = s.files.Open(r.Context(), path.Join(artifactsName(ws, name), rel))
	}
	if errors.Is(err, fs.ErrNotExist) && rel != "" && slices.Contains(j.EmptyArtifacts, rel) {
		body, size, err = io.NopCloser(strings.NewReader("")), 0, nil // kept in the job's record
	}
	if errors.Is(err, fs.ErrNotExist) {
		writeProblem(w, &api.Problem{Status: 404, Code: api.CodeNotFound, Detail: fmt.Sprintf("artifact %q of job %s not found; run 'tide job download %s' to list what it kept", r.PathValue("path"), name, name)})
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("reading artifact %s of job %s from %s: %w", rel, name, s.files, err))
		return
	}
	defer body.Close()
	// The type from the extension, else from the first bytes, as
	// http.ServeFile does.
	br := bufio.NewReaderSize(body, 512)
	ctype := mime.TypeByExtension(path.Ext(rel))
	if ctype == "" {
		head, _ := br.Peek(512)
		ctype = http.DetectContentType(head)
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(200)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, br)
	}
}

// maxArtifacts bounds what one node may upload for one job.
const maxArtifacts = 1 << 30

// agentArtifacts stores a node's tar.gz of a job's outputs/ and logs/:
// unpacked in a scratch folder (which checks every entry), then each file
// put in the server's files; later uploads replace files of the same
// name. Every folder is recorded, so a declared output the job wrote
// nothing to is an empty output, not a missing one. A symbolic link (the
// archive keeps them inside the upload) is stored as a copy of its file.
func (s *Server) agentArtifacts(w http.ResponseWriter, r *http.Request) {
	ws, job, err := s.assignedJob(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	scratch, err := os.MkdirTemp(s.scratchDir(), "artifacts-*")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer os.RemoveAll(scratch)
	if err := archive.Extract(http.MaxBytesReader(w, r.Body, maxArtifacts), scratch, maxArtifacts); err != nil {
		writeProblem(w, &api.Problem{Status: 400, Code: api.CodeBadRequest, Detail: "artifacts: " + err.Error()})
		return
	}
	if err := s.storeTree(r.Context(), scratch, artifactsName(ws, job)); err != nil {
		s.fail(w, r, fmt.Errorf("storing the artifacts of job %s in %s: %w", job, s.files, err))
		return
	}
	w.WriteHeader(204)
}

// jobArtifacts implements service.EmptyArtifacts on the server's files.
type jobArtifacts struct{ files filestore.Store }

// PutEmptyArtifacts implements service.EmptyArtifacts: what storing an
// archive of the same empty files and folders does, without the archive.
func (a jobArtifacts) PutEmptyArtifacts(ctx context.Context, ws, job string, names []string) error {
	for _, n := range names {
		name := path.Join(artifactsName(ws, job), n)
		var err error
		if strings.HasSuffix(n, "/") {
			err = a.files.MakeFolder(ctx, name)
		} else {
			err = a.files.Put(ctx, name, strings.NewReader(""))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// storeTree puts the files and folders under the local folder src into
// the server's files below the folder dst.
func (s *Server) storeTree(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		if d.IsDir() {
			return s.files.MakeFolder(ctx, name)
		}
		info, err := os.Stat(p) // follows a link
		if err != nil || !info.Mode().IsRegular() {
			return nil // a link to a folder: its files are stored where they are
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return s.files.Put(ctx, name, f)
	})
}

// scratchDir is the local folder for files on their way to or from the
// server's files.
func (s *Server) scratchDir() string { return filepath.Join(s.cfg.DataDir, "tmp") }
