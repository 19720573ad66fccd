package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Datastore types. tide adds "local": a folder every node of the
// workspace can read (the same path on each node). Of Azure's types,
// azure_blob is read and written by the nodes with Azure's SDK; the others
// (azure_file, azure_data_lake_gen1, azure_data_lake_gen2) are rejected.
const (
	DatastoreLocal     = "local"
	DatastoreAzureBlob = "azure_blob"
)

// Credential kinds of an azure_blob datastore, as DatastoreCredentials.Type
// reports them.
const (
	CredentialAccountKey = "account_key"
	CredentialSASToken   = "sas_token"
	CredentialNone       = "none"
)

// DatastoreCredentials are an azure_blob datastore's secrets: an account
// key or a SAS token (Azure's YAML), or neither for a public container.
// The server stores them and hands them only to nodes; users get Type.
type DatastoreCredentials struct {
	AccountKey string `json:"account_key,omitempty"`
	SASToken   string `json:"sas_token,omitempty"`
	// Type says which secret is stored; set by the server in answers to
	// users, whose copies never carry the secret itself.
	Type string `json:"type,omitempty"`
}

// Kind returns which secret c holds.
func (c *DatastoreCredentials) Kind() string {
	switch {
	case c == nil:
		return CredentialNone
	case c.AccountKey != "":
		return CredentialAccountKey
	case c.SASToken != "":
		return CredentialSASToken
	case c.Type != "":
		return c.Type
	}
	return CredentialNone
}

// Datastore is a named place data lives, referenced from jobs as
// azureml://datastores/NAME/paths/PATH.
type Datastore struct {
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	// Path is the folder of a local datastore on the nodes (a tide
	// extension to Azure's datastore YAML).
	Path string `json:"path,omitempty"`

	// AccountName and ContainerName locate an azure_blob datastore's
	// container.
	AccountName   string `json:"account_name,omitempty"`
	ContainerName string `json:"container_name,omitempty"`
	// Endpoint is the storage suffix (default core.windows.net) and
	// Protocol https (default) or wasbs, which also means HTTPS.
	Endpoint string `json:"endpoint,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	// EndpointURL (a tide extension) replaces the account's service URL,
	// for Azurite or another service that speaks Azure's blob API, as in
	// http://127.0.0.1:10000/devstoreaccount1.
	EndpointURL string                `json:"endpoint_url,omitempty"`
	Credentials *DatastoreCredentials `json:"credentials,omitempty"`

	// Status, set by the server.
	Workspace string    `json:"workspace,omitempty"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	Etag      string    `json:"etag,omitempty"`
}

// BlobPrefix starts a reference to a snapshot the CLI uploaded: a job's
// code is "blob:HEX" and a data input's path "blob:HEX" (a folder) or
// "blob:HEX/NAME" (the file NAME inside the snapshot), where HEX is the
// SHA-256 of the tar.gz.
const BlobPrefix = "blob:"

// BlobRef returns the reference to file (empty: the whole folder) in the
// snapshot with the given digest.
func BlobRef(digest, file string) string {
	if file == "" {
		return BlobPrefix + digest
	}
	return BlobPrefix + digest + "/" + file
}

// ParseBlobRef splits a blob reference into digest and file.
func ParseBlobRef(s string) (digest, file string, ok bool) {
	rest, ok := strings.CutPrefix(s, BlobPrefix)
	if !ok {
		return "", "", false
	}
	digest, file, _ = strings.Cut(rest, "/")
	return digest, file, true
}

// HasBlob reports whether the server already stores the snapshot with the
// given digest, so the CLI can skip uploading it again.
func (c *Client) HasBlob(ctx context.Context, digest string) (bool, error) {
	code, err := c.do(ctx, http.MethodHead, v1("blobs", digest), nil, nil, nil)
	if code == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// PutBlob uploads a tar.gz snapshot of size bytes under its SHA-256.
func (c *Client) PutBlob(ctx context.Context, digest string, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url(v1("blobs", digest), nil), body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("uploading %s: %w", digest, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return responseError(resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// Datastores lists a workspace's datastores.
func (c *Client) Datastores(ctx context.Context, ws string) ([]Datastore, error) {
	return list[Datastore](ctx, c, v1("workspaces", ws, "datastores"), nil)
}

// Datastore returns one datastore.
func (c *Client) Datastore(ctx context.Context, ws, name string) (*Datastore, error) {
	var out Datastore
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "datastores", name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutDatastore creates or replaces a datastore and reports whether it was created.
func (c *Client) PutDatastore(ctx context.Context, ws string, d *Datastore) (out *Datastore, created bool, err error) {
	if d.Name == "" {
		return nil, false, errors.New("name: required")
	}
	out = new(Datastore)
	code, err := c.do(ctx, http.MethodPut, v1("workspaces", ws, "datastores", d.Name), nil, d, out)
	if err != nil {
		return nil, false, err
	}
	return out, code == http.StatusCreated, nil
}

// DeleteDatastore deletes a datastore; jobs that reference it and have
// not started fail with the reason.
func (c *Client) DeleteDatastore(ctx context.Context, ws, name string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "datastores", name), nil, nil, nil)
	return err
}

// AttributeCacheTTLVar is Azure ML's mount setting for how long, in
// milliseconds, a blob folder's listing may be reused instead of asking
// the storage service again. Unset, tide lists the folder for every job
// (a job's own view never changes while it runs, as Azure's mount with
// the variable unset); set, a node reuses a listing of the same folder
// made at most that long ago by an earlier job.
const AttributeCacheTTLVar = "DATASET_MOUNT_ATTRIBUTE_CACHE_TTL"

// AttributeCacheTTL reads AttributeCacheTTLVar from a job's environment
// variables: 0 when unset.
func AttributeCacheTTL(env map[string]string) (time.Duration, error) {
	v, ok := env[AttributeCacheTTLVar]
	if !ok {
		return 0, nil
	}
	ms, err := strconv.ParseUint(strings.TrimSpace(v), 10, 63)
	if err != nil || ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return 0, fmt.Errorf("environment_variables.%s: %q is not a number of milliseconds (e.g. 60000 reuses a folder's listing for a minute)", AttributeCacheTTLVar, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
