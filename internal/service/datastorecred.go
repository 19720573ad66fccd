package service

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// kindDatastoreCredential keeps the secret an azure_blob datastore's YAML
// gave literally (account_key or sas_token), sealed with the SecretBox
// like workspace secrets. The datastore document keeps only which kind
// is stored, or a ${{secrets.NAME}} reference to a workspace secret.
const kindDatastoreCredential = "datastore-credential"

// storedCredential is a datastore's literal secret as the store keeps it.
type storedCredential struct {
	Workspace string `json:"workspace"`
	Datastore string `json:"datastore"`
	// Kind is account_key or sas_token.
	Kind string `json:"kind"`
	// Sealed is the value sealed with the SecretBox; Value holds it only
	// on a server without one (tests of the service alone).
	Sealed string `json:"sealed,omitempty"`
	Value  string `json:"value,omitempty"`
}

// credentialAAD binds a sealed credential to its datastore, so it opens
// neither as another datastore's nor as a workspace secret.
func credentialAAD(ws, name string) string { return "datastore/" + secretKey(ws, name) }

func (c *storedCredential) seal(box *SecretBox, value string) {
	c.Value, c.Sealed = box.seal(value, credentialAAD(c.Workspace, c.Datastore))
}

func (c *storedCredential) open(box *SecretBox) (string, error) {
	return box.open(c.Value, c.Sealed, credentialAAD(c.Workspace, c.Datastore),
		fmt.Sprintf("datastore %s of workspace %s: credentials.%s", c.Datastore, c.Workspace, c.Kind))
}

// credentialRefRE is a credential that names a workspace secret, alone.
var credentialRefRE = regexp.MustCompile(`^\$\{\{\s*secrets\.([A-Za-z][A-Za-z0-9_-]*)\s*\}\}$`)

// credentialValue returns the secret c gives (account key or SAS token)
// and the workspace secret it names, if it names one.
func credentialValue(c *api.DatastoreCredentials) (value, ref string) {
	if c == nil {
		return "", ""
	}
	value = c.AccountKey + c.SASToken // validation allows one of them
	if m := credentialRefRE.FindStringSubmatch(strings.TrimSpace(value)); m != nil {
		return value, m[1]
	}
	return value, ""
}

// storeCredentials moves the secret of datastore d (being put) into its
// own sealed record, leaving in d only its kind; a ${{secrets.NAME}}
// reference stays in d, once the secret is known to exist. kept says d
// carries the credentials of the document it replaces.
func (s *Service) storeCredentials(ctx context.Context, tx store.Tx, d *api.Datastore, kept bool) error {
	key := secretKey(d.Workspace, d.Name)
	value, ref := credentialValue(d.Credentials)
	field := "credentials." + d.Credentials.Kind()
	switch {
	case value == "" && d.Credentials.Kind() == api.CredentialNone:
		d.Credentials = nil
		return deleteObject(ctx, tx, kindDatastoreCredential, key)
	case value == "" && kept:
		return nil // the stored record stays
	case value == "":
		c := d.Credentials
		e := errorf(400, api.CodeValidation, "credentials: the document names a stored %s, but datastore %s has none for account %s and container %s; give credentials.%s", c.Type, d.Name, d.AccountName, d.ContainerName, c.Type)
		e.Field = "credentials"
		return e
	case ref != "":
		if _, err := tx.GetObject(ctx, kindSecret, secretKey(d.Workspace, ref)); store.IsNotFound(err) {
			e := errorf(400, api.CodeValidation, "%s: secret %q does not exist in workspace %s; set it with 'tide secret set %s'", field, ref, d.Workspace, ref)
			e.Field = field
			return e
		} else if err != nil {
			return err
		}
		d.Credentials = &api.DatastoreCredentials{AccountKey: d.Credentials.AccountKey, SASToken: d.Credentials.SASToken}
		return deleteObject(ctx, tx, kindDatastoreCredential, key)
	case strings.Contains(value, "${{"):
		e := errorf(400, api.CodeValidation, "%s: give the secret itself or ${{secrets.NAME}} alone, naming a workspace secret", field)
		e.Field = field
		return e
	}
	c := storedCredential{Workspace: d.Workspace, Datastore: d.Name, Kind: d.Credentials.Kind()}
	c.seal(s.SecretBox, value)
	d.Credentials = &api.DatastoreCredentials{Type: c.Kind}
	return putObject(ctx, tx, kindDatastoreCredential, key, c)
}

// deleteObject deletes an object that may not exist.
func deleteObject(ctx context.Context, tx store.Tx, kind, key string) error {
	if err := tx.DeleteObject(ctx, kind, key); err != nil && !store.IsNotFound(err) {
		return err
	}
	return nil
}

// openCredentials fills in the secret of a datastore read from the store:
// the sealed record, or the workspace secret its reference names.
func (s *Service) openCredentials(ctx context.Context, tx store.Tx, d *api.Datastore) error {
	value, ref := credentialValue(d.Credentials)
	kind := d.Credentials.Kind()
	switch {
	case ref != "":
		v, err := openWorkspaceSecret(ctx, tx, s.SecretBox, d.Workspace, ref)
		if err != nil {
			return fmt.Errorf("datastore %s: credentials.%s: %w", d.Name, kind, err)
		}
		value = v
	case value == "" && kind != api.CredentialNone:
		c, err := getObject[storedCredential](ctx, tx, kindDatastoreCredential, secretKey(d.Workspace, d.Name))
		if store.IsNotFound(err) {
			return fmt.Errorf("datastore %s: its credentials.%s is not stored; give it again with 'tide datastore create -f ds.yml'", d.Name, kind)
		}
		if err != nil {
			return err
		}
		if value, err = c.open(s.SecretBox); err != nil {
			return err
		}
	default:
		return nil // none, or in clear (a default datastore from the server config)
	}
	d.Credentials = &api.DatastoreCredentials{}
	if kind == api.CredentialAccountKey {
		d.Credentials.AccountKey = value
	} else {
		d.Credentials.SASToken = value
	}
	return nil
}

// datastoresUsingSecret names the datastores whose credentials name a
// workspace secret.
func datastoresUsingSecret(ctx context.Context, tx store.Tx, ws, secret string) ([]string, error) {
	ds, err := tx.ListDatastores(ctx, ws)
	var names []string
	for _, d := range ds {
		if _, ref := credentialValue(d.Credentials); ref == secret {
			names = append(names, d.Name)
		}
	}
	return names, err
}

// jobUsesDatastore reports whether a job reads or writes datastore name
// (its paths are stored in the short form azureml://datastores/NAME/...).
func jobUsesDatastore(j *api.Job, name string) bool {
	uses := func(p string) bool {
		n, _, problem := spec.ParseDatastorePath(p)
		return problem == "" && n == name
	}
	for _, in := range j.Inputs {
		if api.IsDataType(in.Type) && uses(in.Path) {
			return true
		}
	}
	for _, o := range j.Outputs {
		if uses(o.Path) {
			return true
		}
	}
	return false
}

// NodeDatastore returns a datastore with its credentials for the node
// that reads or writes it for its job. A node gets an azure_blob
// datastore's secret only while it runs a job of the datastore's
// workspace whose inputs or outputs name it.
func (s *Service) NodeDatastore(ctx context.Context, node, ws, name string) (*api.Datastore, error) {
	var out *api.Datastore
	err := s.Store.View(ctx, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, node)
		if store.IsNotFound(err) || err == nil && n.Workspace != ws {
			return errorf(403, "Forbidden", "node %s may read only its own workspace's datastores", node)
		}
		if err != nil {
			return err
		}
		if out, err = s.datastore(ctx, tx, ws, name); err != nil {
			return err
		}
		if out.Credentials.Kind() == api.CredentialNone {
			return nil
		}
		var j *api.Job
		if jws, job, _, perr := ParseAssignmentID(n.Job); perr == nil && jws == ws {
			if j, err = tx.GetJob(ctx, ws, job); err != nil && !store.IsNotFound(err) {
				return err
			}
		}
		if j == nil || !jobUsesDatastore(j, name) {
			return errorf(403, "Forbidden", "node %s runs no job that reads or writes datastore %s; a node gets a datastore's credentials only for its job's inputs and outputs", node, name)
		}
		return s.openCredentials(ctx, tx, out)
	})
	return out, err
}
