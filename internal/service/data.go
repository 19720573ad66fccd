package service

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// Blobs is what the service needs of the blob store: whether a code or
// data snapshot was uploaded.
type Blobs interface {
	Has(ctx context.Context, digest string) bool
}

// checkData checks, when a job is submitted, that its code and data inputs
// can be fetched and its outputs written by a node: snapshots were
// uploaded, datastores exist and are local folders or blob containers.
// Datastore, wasbs:// and blob https:// paths are rewritten as
// azureml://datastores/NAME/paths/PATH, output placeholders expanded.
func (s *Service) checkData(ctx context.Context, tx store.Tx, ws string, j *api.Job) error {
	bad := fieldError
	if j.Code != "" {
		if err := s.checkSnapshot(ctx, j.Code, "code", bad); err != nil {
			return err
		}
	}
	if e := j.Environment; e != nil && e.Build != nil {
		// An uploaded build context must be there; a folder path is one
		// the node reads (a local node, or a client that did not upload).
		if _, _, ok := api.ParseBlobRef(e.Build.Path); ok {
			if err := s.checkSnapshot(ctx, e.Build.Path, "environment.build.path", bad); err != nil {
				return err
			}
		}
	}
	names := make([]string, 0, len(j.Inputs))
	for name := range j.Inputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		in, field := j.Inputs[name], "inputs."+name+".path"
		if !api.IsDataType(in.Type) {
			continue
		}
		kind, _ := spec.ClassifyDataPath(in.Path)
		if kind == spec.PathAsset {
			var err error
			if in, err = s.resolveDataAsset(ctx, tx, ws, in, field, bad); err != nil {
				return err
			}
			j.Inputs[name] = in
			kind, _ = spec.ClassifyDataPath(in.Path)
		}
		switch kind {
		case spec.PathLocal, spec.PathBlob:
			if err := s.checkSnapshot(ctx, in.Path, field, bad); err != nil {
				return err
			}
		case spec.PathDatastore, spec.PathWASB, spec.PathHTTP:
			p, err := s.resolveDataPath(ctx, tx, ws, kind, in.Path, field, bad)
			if err != nil {
				return err
			}
			in.Path = p
			j.Inputs[name] = in
		}
	}
	outs := make([]string, 0, len(j.Outputs))
	for name := range j.Outputs {
		outs = append(outs, name)
	}
	slices.Sort(outs)
	for _, name := range outs {
		o, field := j.Outputs[name], "outputs."+name+".path"
		if o.Path == "" {
			continue
		}
		p := expandOutputPath(o.Path, j.Name, name)
		kind, problem := spec.ClassifyDataPath(p)
		if problem != "" {
			return bad(field, "%s", problem)
		}
		if kind != spec.PathDatastore && kind != spec.PathWASB {
			return bad(field, "%q: outputs go to a datastore; use azureml://datastores/NAME/paths/PATH", o.Path)
		}
		p, err := s.resolveDataPath(ctx, tx, ws, kind, p, field, bad)
		if err != nil {
			return err
		}
		o.Path = p
		j.Outputs[name] = o
	}
	return nil
}

// expandOutputPath replaces Azure's placeholders in an output path:
// ${{name}} is the job's name, ${{output_name}} the output's.
func expandOutputPath(p, job, output string) string {
	return strings.NewReplacer("${{name}}", job, "${{output_name}}", output).Replace(p)
}

// resolveDataPath checks a datastore, wasbs:// or blob https:// path and
// returns it as azureml://datastores/NAME/paths/PATH in the job's
// workspace, which is what nodes resolve. An https URL that no
// registered datastore covers is returned as it is (fetched over HTTP).
func (s *Service) resolveDataPath(ctx context.Context, tx store.Tx, ws, kind, p, field string, bad func(field, format string, args ...any) error) (string, error) {
	if kind == spec.PathWASB || kind == spec.PathHTTP {
		u, ok := spec.ParseBlobURL(p)
		if !ok {
			return p, nil
		}
		all, err := s.allDatastores(ctx, tx, ws)
		if err != nil {
			return "", err
		}
		var match []string
		for _, d := range all {
			ep := d.Endpoint
			if ep == "" {
				ep = azureblob.DefaultEndpoint
			}
			if d.Type == api.DatastoreAzureBlob && d.AccountName == u.Account && d.ContainerName == u.Container && strings.EqualFold(ep, u.Endpoint) {
				match = append(match, d.Name)
			}
		}
		switch {
		case len(match) == 1:
			return spec.DatastoreURI(match[0], u.Path), nil
		case len(match) > 1:
			return "", bad(field, "datastores %s of workspace %s are all container %s of account %s; say which with azureml://datastores/NAME/paths/%s",
				strings.Join(match, ", "), ws, u.Container, u.Account, u.Path)
		case kind == spec.PathHTTP:
			return p, nil
		}
		return "", bad(field, "no datastore of workspace %s is container %s of account %s; register it with 'tide datastore create -f ds.yml' (type: azure_blob, account_name: %s, container_name: %s, credentials: account_key or sas_token), or use azureml://datastores/NAME/paths/PATH",
			ws, u.Container, u.Account, u.Account, u.Container)
	}
	if other, ok := spec.LongDatastoreWorkspace(p); ok && other != ws {
		return "", bad(field, "%q names workspace %s, but the job runs in workspace %s; use azureml://datastores/NAME/paths/PATH or submit to workspace %s", p, other, ws, other)
	}
	dsName, rel, _ := spec.ParseDatastorePath(p)
	ds, err := s.findDatastore(ctx, tx, ws, dsName)
	if store.IsNotFound(err) {
		return "", bad(field, "datastore %q not found in workspace %s; create it with 'tide datastore create -f ds.yml' (type: local with path: /a/folder, or type: azure_blob)", dsName, ws)
	}
	if err != nil {
		return "", err
	}
	if ds.Type != api.DatastoreLocal && ds.Type != api.DatastoreAzureBlob {
		return "", bad(field, "datastore %q has type %s, which tide cannot read; use a datastore of type local or azure_blob", dsName, ds.Type)
	}
	return spec.DatastoreURI(dsName, rel), nil
}

// fieldError is a 400 validation error naming field.
func fieldError(field, format string, args ...any) error {
	e := errorf(400, api.CodeValidation, "%s: %s", field, fmt.Sprintf(format, args...))
	e.Field = field
	return e
}

// checkSnapshot checks a reference to an uploaded snapshot. A plain path
// means the job came from a client that did not upload it.
func (s *Service) checkSnapshot(ctx context.Context, ref, field string, bad func(field, format string, args ...any) error) error {
	digest, _, ok := api.ParseBlobRef(ref)
	if !ok {
		return bad(field, "%q is a path on your machine, which the server cannot read; submit with 'tide job create -f FILE', which uploads it, or use a file://, http(s):// or azureml://datastores/ path", ref)
	}
	if uploaded, _ := ctx.Value(uploadedKey{}).(map[string]bool); uploaded[digest] {
		return nil
	}
	if s.Blobs == nil || !s.Blobs.Has(ctx, digest) {
		return bad(field, "snapshot %s was not uploaded; submit with 'tide job create -f FILE', which uploads it", ref)
	}
	return nil
}

// uploadedKey is the context key of the snapshots found uploaded before a
// submission's transaction began (lookUpSnapshots).
type uploadedKey struct{}

// lookUpSnapshots asks the blob store, before a submission waits for the
// store's writer, which of the snapshots the job names (its code, its
// build context, its inputs) were uploaded, and returns ctx carrying the
// answer, for checkSnapshot to use inside the transaction: with blobs in
// Azure, each question is a request, and a batch of submissions asking
// them inside its transaction would hold the one writer for all of them.
// Snapshots are named by their content, so one found uploaded stays so;
// one not found is asked again inside, where the error is made.
func (s *Service) lookUpSnapshots(ctx context.Context, j *api.Job) context.Context {
	if s.Blobs == nil {
		return ctx
	}
	refs := []string{j.Code}
	if e := j.Environment; e != nil && e.Build != nil {
		refs = append(refs, e.Build.Path)
	}
	for _, in := range j.Inputs {
		refs = append(refs, in.Path)
	}
	uploaded := map[string]bool{}
	for _, ref := range refs {
		if digest, _, ok := api.ParseBlobRef(ref); ok && !uploaded[digest] && s.Blobs.Has(ctx, digest) {
			uploaded[digest] = true
		}
	}
	return context.WithValue(ctx, uploadedKey{}, uploaded)
}

// addData puts what a node needs to fetch a job's code and data inputs
// into its assignment.
func addData(a *api.Assignment, j *api.Job) {
	if digest, _, ok := api.ParseBlobRef(j.Code); ok {
		a.Code = digest
	}
	for name, in := range j.Inputs {
		if api.IsDataType(in.Type) {
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
		if o.Path != "" {
			if a.OutputPaths == nil {
				a.OutputPaths = map[string]string{}
			}
			a.OutputPaths[name] = o.Path
		}
	}
	slices.Sort(a.FileOutputs)
}
