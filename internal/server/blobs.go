package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/blob"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/spec"
)

// dataRoutes are the routes of code and data snapshots and datastores.
func (s *Server) dataRoutes() []route {
	ws := "/v1/workspaces/{workspace}"
	return []route{
		{method: "HEAD", pattern: "/v1/blobs/{digest}", auth: authSignedIn, summary: "Whether a code or data snapshot (tar.gz, named by its SHA-256) is stored", handler: s.headBlob},
		{method: "PUT", pattern: "/v1/blobs/{digest}", auth: authSignedIn, rawBody: true, summary: "Upload a code or data snapshot: a tar.gz named by its SHA-256, at most max_data_size", status: 201, handler: s.putBlob},
		{method: "GET", pattern: "/v1/agent/blobs/{digest}", auth: authNode, summary: "Agent: download a code or data snapshot", handler: s.agentBlob},
		{method: "GET", pattern: "/v1/agent/workspaces/{workspace}/datastores/{name}", auth: authNode, summary: "Agent: a datastore with its credentials, to resolve azureml://datastores/ paths", response: api.Datastore{}, handler: s.agentDatastore},

		{method: "GET", pattern: ws + "/datastores", auth: can(service.PermDataRead), summary: "List datastores", response: api.List[api.Datastore]{}, handler: s.listDatastores},
		{method: "PUT", pattern: ws + "/datastores/{name}", auth: can(service.PermDataWrite), summary: "Create or replace a datastore", request: api.Datastore{}, response: api.Datastore{}, status: 201, handler: s.putDatastore},
		{method: "GET", pattern: ws + "/datastores/{name}", auth: can(service.PermDataRead), summary: "Get a datastore", response: api.Datastore{}, handler: s.getDatastore},
		{method: "DELETE", pattern: ws + "/datastores/{name}", auth: can(service.PermDataWrite), summary: "Delete a datastore", status: 204, handler: s.deleteDatastore},
	}
}

func (s *Server) headBlob(w http.ResponseWriter, r *http.Request) {
	if !s.blobs.Has(r.Context(), r.PathValue("digest")) {
		w.WriteHeader(404)
		return
	}
	w.WriteHeader(200)
}

// tooLarge is the 413 answer that names the limit and how to change it.
func (s *Server) tooLarge(w http.ResponseWriter, size int64) {
	got := ""
	if size > 0 {
		got = fmt.Sprintf(" (got %s)", config.ByteSize(size))
	}
	writeProblem(w, &api.Problem{Status: 413, Code: "TooLarge", Detail: fmt.Sprintf(
		"snapshot larger than the server's max_data_size of %s%s; leave large files out with .amlignore, put data on a datastore or an http(s) URL, or raise max_data_size in the server config (or TIDE_MAX_DATA_SIZE)",
		config.ByteSize(s.blobs.Limit()), got)})
}

func (s *Server) putBlob(w http.ResponseWriter, r *http.Request) {
	digest := r.PathValue("digest")
	if !blob.ValidDigest(digest) {
		writeProblem(w, &api.Problem{Status: 400, Code: api.CodeBadRequest, Detail: fmt.Sprintf("blob name %q: want the lower-case hex SHA-256 of the tar.gz", digest)})
		return
	}
	// Refused before reading, so a client that sent Expect: 100-continue
	// does not send the body at all.
	if limit := s.blobs.Limit(); limit > 0 && r.ContentLength > limit {
		s.tooLarge(w, r.ContentLength)
		return
	}
	if s.blobs.Has(r.Context(), digest) {
		w.WriteHeader(200)
		return
	}
	err := s.blobs.Put(r.Context(), digest, r.Body)
	switch {
	case err == nil:
		w.WriteHeader(201)
	case errors.Is(err, blob.ErrTooLarge):
		s.tooLarge(w, r.ContentLength)
	case errors.Is(err, blob.ErrDigest), errors.Is(err, blob.ErrArchive):
		writeProblem(w, &api.Problem{Status: 400, Code: api.CodeBadRequest, Detail: "snapshot " + digest + ": " + err.Error()})
	default:
		s.fail(w, r, err)
	}
}

func (s *Server) agentBlob(w http.ResponseWriter, r *http.Request) {
	f, size, err := s.blobs.Open(r.Context(), r.PathValue("digest"))
	if errors.Is(err, fs.ErrNotExist) {
		writeProblem(w, &api.Problem{Status: 404, Code: api.CodeNotFound, Detail: fmt.Sprintf("snapshot %s not found on the server", r.PathValue("digest"))})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	_, _ = io.Copy(w, f)
}

func (s *Server) listDatastores(w http.ResponseWriter, r *http.Request) {
	ds, err := s.svc.Datastores(r.Context(), r.PathValue("workspace"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ds))
}

func (s *Server) putDatastore(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.svc.ParseDatastore(stripReadOnly(spec.KindDatastore, b))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if name := r.PathValue("name"); d.Name != "" && d.Name != name {
		writeProblem(w, &api.Problem{Status: 400, Code: api.CodeValidation, Field: "name", Detail: fmt.Sprintf("name: the body says %q but the URL %q; make them agree", d.Name, name)})
		return
	}
	d.Name = r.PathValue("name")
	out, created, err := s.svc.PutDatastore(r.Context(), r.PathValue("workspace"), d)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, createdStatus(created), out)
}

func (s *Server) getDatastore(w http.ResponseWriter, r *http.Request) {
	d, err := s.svc.Datastore(r.Context(), r.PathValue("workspace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, d)
}

func (s *Server) agentDatastore(w http.ResponseWriter, r *http.Request) {
	d, err := s.svc.NodeDatastore(r.Context(), principalOf(r).node, r.PathValue("workspace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, d)
}

func (s *Server) deleteDatastore(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteDatastore(r.Context(), r.PathValue("workspace"), r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(204)
}
