package service

import (
	"context"
	"fmt"
	"slices"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// Blobs is what the service needs of the blob store: whether a code or
// data snapshot was uploaded.
type Blobs interface {
	Has(digest string) bool
}

// checkData checks, when a job is submitted, that its code and data inputs
// can be fetched by a node: snapshots were uploaded, datastores exist and
// are local folders. Azure-only stores were rejected by the spec already.
func (s *Service) checkData(ctx context.Context, tx store.Tx, ws string, j *api.Job, preUpload bool) error {
	bad := func(field, format string, args ...any) error {
		e := errorf(400, api.CodeValidation, "%s: %s", field, fmt.Sprintf(format, args...))
		e.Field = field
		return e
	}
	var ps problems
	if j.Code != "" && !(preUpload && isLocal(j.Code)) {
		ps.add(s.checkSnapshot(j.Code, "code", bad))
	}
	names := make([]string, 0, len(j.Inputs))
	for name := range j.Inputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		in, field := j.Inputs[name], "inputs."+name+".path"
		if in.Type != api.InputURIFile && in.Type != api.InputURIFolder {
			continue
		}
		kind, _ := spec.ClassifyDataPath(in.Path)
		switch kind {
		case spec.PathLocal, spec.PathBlob:
			if preUpload && kind == spec.PathLocal {
				continue // uploaded next
			}
			ps.add(s.checkSnapshot(in.Path, field, bad))
		case spec.PathDatastore:
			dsName, _, _ := spec.ParseDatastorePath(in.Path)
			ds, err := tx.GetDatastore(ctx, ws, dsName)
			if store.IsNotFound(err) {
				hint := "create it with 'tide datastore create -f ds.yml' (type: local, path: /a/folder)"
				if slices.Contains([]string{"workspaceblobstore", "workspacefilestore", "workspaceartifactstore", "workspaceworkingdirectory"}, dsName) {
					hint = "it is an Azure ML workspace's built-in Azure storage, which tide cannot reach; copy the data to a folder the nodes can read and " + hint
				}
				ps.add(bad(field, "datastore %q not found in workspace %s; %s", dsName, ws, hint))
				continue
			}
			if err != nil {
				return err
			}
			if ds.Type != api.DatastoreLocal {
				ps.add(bad(field, "datastore %q has type %s, which tide cannot read; use a datastore of type local", dsName, ds.Type))
			}
		}
	}
	return ps.err()
}

// isLocal reports whether ref is a path on the client's machine (not yet
// an uploaded snapshot).
func isLocal(ref string) bool {
	_, _, ok := api.ParseBlobRef(ref)
	return !ok
}

// checkSnapshot checks a reference to an uploaded snapshot. A plain path
// means the job came from a client that did not upload it.
func (s *Service) checkSnapshot(ref, field string, bad func(field, format string, args ...any) error) error {
	digest, _, ok := api.ParseBlobRef(ref)
	if !ok {
		return bad(field, "%q is a path on your machine, which the server cannot read; submit with 'tide job create -f FILE', which uploads it, or use a file://, http(s):// or azureml://datastores/ path", ref)
	}
	if s.Blobs == nil || !s.Blobs.Has(digest) {
		return bad(field, "snapshot %s was not uploaded; submit with 'tide job create -f FILE', which uploads it", ref)
	}
	return nil
}

// addData puts what a node needs to fetch a job's code and data inputs
// into its assignment.
func addData(a *api.Assignment, j *api.Job) {
	if digest, _, ok := api.ParseBlobRef(j.Code); ok {
		a.Code = digest
	}
	for name, in := range j.Inputs {
		if in.Type == api.InputURIFile || in.Type == api.InputURIFolder {
			if a.Data == nil {
				a.Data = map[string]api.JobInput{}
			}
			a.Data[name] = in
		}
	}
	for name, o := range j.Outputs {
		if o.Type == api.InputURIFile {
			a.FileOutputs = append(a.FileOutputs, name)
		}
	}
	slices.Sort(a.FileOutputs)
}
