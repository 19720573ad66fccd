package service

import (
	"context"
	"os"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// ParseDatastore parses a datastore document (YAML or JSON) from a request body.
func (s *Service) ParseDatastore(body []byte) (*api.Datastore, error) {
	d, err := spec.ParseDatastore("request body", body, nil)
	if err != nil {
		return nil, validation(err)
	}
	return d, nil
}

// PutDatastore creates or replaces a datastore and reports whether it was
// created. Jobs resolve datastore paths when they start, so a change
// applies to jobs that have not started yet.
func (s *Service) PutDatastore(ctx context.Context, ws string, d *api.Datastore) (*api.Datastore, bool, error) {
	if err := spec.ValidateDatastore(d); err != nil {
		return nil, false, validation(err)
	}
	created, given := false, *d
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		created = false
		kept := false
		*d = given // the store may run this again
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		old, err := tx.GetDatastore(ctx, ws, d.Name)
		switch {
		case store.IsNotFound(err):
			created = true
			d.CreatedOn = s.now()
		case err != nil:
			return err
		default:
			d.CreatedOn = old.CreatedOn
			kept = keepCredentials(d, old)
		}
		d.Workspace = ws
		if d.Type == api.DatastoreAzureBlob {
			if err := s.storeCredentials(ctx, tx, d, kept); err != nil {
				return err
			}
		} else if err := deleteObject(ctx, tx, kindDatastoreCredential, secretKey(ws, d.Name)); err != nil {
			return err
		}
		return tx.PutDatastore(ctx, d, "")
	})
	if err != nil {
		return nil, false, s.mapStoreErr(err, "datastore", d.Name)
	}
	return redact(d), created, nil
}

// keepCredentials lets a document that carries no secret (one edited from
// 'tide datastore show -o yaml', which never shows it) keep the stored
// one, as long as it names the same container. It reports whether it
// kept it.
func keepCredentials(d, old *api.Datastore) bool {
	if d.Type != api.DatastoreAzureBlob || old.Type != api.DatastoreAzureBlob || old.Credentials == nil {
		return false
	}
	if d.Credentials != nil && (d.Credentials.AccountKey != "" || d.Credentials.SASToken != "") {
		return false
	}
	want := api.CredentialNone
	if d.Credentials != nil && d.Credentials.Type != "" {
		want = d.Credentials.Type
	}
	if d.AccountName == old.AccountName && d.ContainerName == old.ContainerName && want == old.Credentials.Kind() {
		d.Credentials = old.Credentials
		return true
	}
	return false
}

// redact returns a copy of d without its secrets, for users: they see
// which kind of credentials is stored, or the workspace secret it names,
// never the secret.
func redact(d *api.Datastore) *api.Datastore {
	c := *d
	if d.Type == api.DatastoreAzureBlob {
		c.Credentials = &api.DatastoreCredentials{Type: d.Credentials.Kind()}
		if _, ref := credentialValue(d.Credentials); ref != "" {
			c.Credentials = &api.DatastoreCredentials{AccountKey: d.Credentials.AccountKey, SASToken: d.Credentials.SASToken}
		}
	}
	return &c
}

// findDatastore returns a registered datastore or, for the default names,
// the server's default; a store NotFound error otherwise.
func (s *Service) findDatastore(ctx context.Context, tx store.Tx, ws, name string) (*api.Datastore, error) {
	d, err := tx.GetDatastore(ctx, ws, name)
	if store.IsNotFound(err) && slices.Contains(config.DefaultDatastoreNames, name) {
		return s.defaultDatastore(ws, name), nil
	}
	return d, err
}

// defaultDatastore is workspace ws's default datastore name. Its local
// folder is made here, so the first job can write to it.
func (s *Service) defaultDatastore(ws, name string) *api.Datastore {
	d := s.Config.DefaultDatastore(ws, name)
	if d.Type == api.DatastoreLocal {
		_ = os.MkdirAll(d.Path, 0o755)
	}
	return d
}

// allDatastores lists a workspace's registered datastores and the
// defaults it has not replaced, by name.
func (s *Service) allDatastores(ctx context.Context, tx store.Tx, ws string) ([]api.Datastore, error) {
	ds, err := tx.ListDatastores(ctx, ws)
	if err != nil {
		return nil, err
	}
	for _, name := range config.DefaultDatastoreNames {
		if !slices.ContainsFunc(ds, func(d api.Datastore) bool { return d.Name == name }) {
			ds = append(ds, *s.defaultDatastore(ws, name))
		}
	}
	slices.SortFunc(ds, func(a, b api.Datastore) int { return strings.Compare(a.Name, b.Name) })
	return ds, nil
}

func (s *Service) datastore(ctx context.Context, tx store.Tx, ws, name string) (*api.Datastore, error) {
	if _, err := s.workspace(ctx, tx, ws); err != nil {
		return nil, err
	}
	d, err := s.findDatastore(ctx, tx, ws, name)
	if store.IsNotFound(err) {
		return nil, notFound("datastore", name, "run 'tide datastore list' to see the datastores of workspace "+ws+", or create it with 'tide datastore create -f ds.yml' (type: local, path: /a/folder)")
	}
	return d, err
}

// Datastore returns one datastore, without its secrets.
func (s *Service) Datastore(ctx context.Context, ws, name string) (*api.Datastore, error) {
	var out *api.Datastore
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		out, err = s.datastore(ctx, tx, ws, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return redact(out), nil
}

// Datastores lists a workspace's datastores by name.
func (s *Service) Datastores(ctx context.Context, ws string) ([]api.Datastore, error) {
	out := []api.Datastore{}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		ds, err := s.allDatastores(ctx, tx, ws)
		for i := range ds {
			out = append(out, *redact(&ds[i]))
		}
		return err
	})
	return out, err
}

// DeleteDatastore deletes a datastore. A queued job that references it
// fails when it starts, with the reason. A default datastore that the
// workspace replaced with its own comes back; one it did not cannot be
// deleted.
func (s *Service) DeleteDatastore(ctx context.Context, ws, name string) error {
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := s.datastore(ctx, tx, ws, name); err != nil {
			return err
		}
		if _, err := tx.GetDatastore(ctx, ws, name); store.IsNotFound(err) {
			return errorf(409, api.CodeConflict, "datastore %s is workspace %s's default datastore, set by the server config (default_datastores); it cannot be deleted. Register your own with 'tide datastore create' to replace it", name, ws)
		}
		if err := deleteObject(ctx, tx, kindDatastoreCredential, secretKey(ws, name)); err != nil {
			return err
		}
		return tx.DeleteDatastore(ctx, ws, name)
	})
}
