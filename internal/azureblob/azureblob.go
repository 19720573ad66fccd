// Package azureblob reads and writes the container of an azure_blob
// datastore with Azure's Go SDK. Nodes use it to fetch inputs and upload
// outputs; the server never touches user data. Errors name the datastore
// and say what to fix: the service's 403 becomes "authentication failed",
// a missing container or path is named with the URL.
package azureblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/tideml/tide/api"
)

// ErrAuthentication: the service refused the credentials (its 403).
var ErrAuthentication = errors.New("authentication failed")

// DefaultEndpoint is Azure's public storage suffix.
const DefaultEndpoint = "core.windows.net"

// Store is one datastore's container.
type Store struct {
	name, account, container string
	c                        *container.Client
}

// retry is the SDK's back-off for a service that is unreachable or busy:
// four more tries, 0.5 s doubling to 8 s, before the job fails with the
// reason.
var retry = policy.RetryOptions{MaxRetries: 4, RetryDelay: 500 * time.Millisecond, MaxRetryDelay: 8 * time.Second}

// ServiceURL is the account's blob service URL: endpoint_url when set,
// else https://ACCOUNT.blob.ENDPOINT.
func ServiceURL(ds *api.Datastore) string {
	if ds.EndpointURL != "" {
		return strings.TrimRight(ds.EndpointURL, "/")
	}
	ep := ds.Endpoint
	if ep == "" {
		ep = DefaultEndpoint
	}
	return "https://" + ds.AccountName + ".blob." + ep
}

// New returns the container of an azure_blob datastore, with its
// credentials (an account key, a SAS token, or none for a public
// container).
func New(ds *api.Datastore) (*Store, error) {
	if ds.Type != api.DatastoreAzureBlob {
		return nil, fmt.Errorf("datastore %s has type %s, not azure_blob", ds.Name, ds.Type)
	}
	s := &Store{name: ds.Name, account: ds.AccountName, container: ds.ContainerName}
	u := ServiceURL(ds) + "/" + url.PathEscape(ds.ContainerName)
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: retry}}
	var err error
	switch c := ds.Credentials; c.Kind() {
	case api.CredentialAccountKey:
		var cred *container.SharedKeyCredential
		cred, err = container.NewSharedKeyCredential(ds.AccountName, c.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("datastore %s: credentials.account_key: %w", ds.Name, err)
		}
		s.c, err = container.NewClientWithSharedKeyCredential(u, cred, opts)
	case api.CredentialSASToken:
		s.c, err = container.NewClientWithNoCredential(u+"?"+strings.TrimPrefix(c.SASToken, "?"), opts)
	case api.CredentialNone:
		s.c, err = container.NewClientWithNoCredential(u, opts)
	default:
		return nil, fmt.Errorf("datastore %s: the node got no secret for credentials of type %s", ds.Name, c.Kind())
	}
	if err != nil {
		return nil, fmt.Errorf("datastore %s: %w", ds.Name, err)
	}
	return s, nil
}

// URL is the address of path p in the container, for messages.
func (s *Store) URL(p string) string {
	u := strings.SplitN(s.c.URL(), "?", 2)[0]
	if p == "" {
		return u
	}
	return u + "/" + p
}

// explain turns the service's errors into ones that say what to fix.
func (s *Store) explain(err error, p string) error {
	switch {
	case err == nil:
		return nil
	case bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.AuthorizationFailure,
		bloberror.AuthorizationPermissionMismatch, bloberror.InsufficientAccountPermissions):
		return fmt.Errorf("datastore %s: %w for account %s; check credentials.account_key or credentials.sas_token (tide datastore create -f ds.yml replaces them)", s.name, ErrAuthentication, s.account)
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return fmt.Errorf("datastore %s: container %s not found in account %s (%s); create it or fix container_name", s.name, s.container, s.account, s.URL(""))
	case bloberror.HasCode(err, bloberror.BlobNotFound):
		return fmt.Errorf("datastore %s: no blob at %s: %w", s.name, s.URL(p), fs.ErrNotExist)
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return fmt.Errorf("datastore %s: %s: the service answered %d %s", s.name, s.URL(p), re.StatusCode, re.ErrorCode)
	}
	return &redactedError{msg: fmt.Sprintf("datastore %s: %s: %s", s.name, s.URL(p), sasSignatureRE.ReplaceAllString(err.Error(), "${1}REDACTED")), err: err}
}

// sasSignatureRE finds a SAS token's signature, its secret part, in the
// URLs the SDK's transport errors quote, so it stays out of job errors.
var sasSignatureRE = regexp.MustCompile(`(?i)([?&]sig=)[^&\s"]+`)

// redactedError is an error whose message had a secret taken out.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Object is a blob found under a prefix.
type Object struct {
	// Name is the path below the prefix, with slashes.
	Name string
	Size int64
	// Version changes whenever the content does: the MD5 when the service
	// keeps one, else the etag.
	Version string
}

// Stat describes the blob at p.
func (s *Store) Stat(ctx context.Context, p string) (Object, error) {
	props, err := s.c.NewBlobClient(p).GetProperties(ctx, nil)
	if err != nil {
		return Object{}, s.explain(err, p)
	}
	o := Object{Name: path.Base(p)}
	if props.ContentLength != nil {
		o.Size = *props.ContentLength
	}
	o.Version = version(props.ContentMD5, props.ETag)
	return o, nil
}

func version(md5 []byte, etag *azcore.ETag) string {
	if len(md5) > 0 {
		return fmt.Sprintf("md5:%x", md5)
	}
	if etag != nil {
		return "etag:" + strings.Trim(string(*etag), `"`)
	}
	return ""
}

// List returns the blobs under folder prefix p ("" is the whole
// container), by name. Folder markers (empty blobs ending in "/", or with
// Data Lake's hdi_isfolder) are left out. A name that would leave the
// folder ("..") is an error: it could write outside the download.
func (s *Store) List(ctx context.Context, p string) ([]Object, error) {
	prefix := strings.Trim(p, "/")
	if prefix != "" {
		prefix += "/"
	}
	var out []Object
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, s.explain(err, p)
		}
		for _, b := range page.Segment.BlobItems {
			if b.Name == nil || b.Properties == nil {
				continue
			}
			rel := strings.TrimPrefix(*b.Name, prefix)
			if isFolderMarker(rel, b) {
				continue
			}
			if !fs.ValidPath(rel) {
				return nil, fmt.Errorf("datastore %s: blob name %q is not a safe relative path; rename it", s.name, *b.Name)
			}
			o := Object{Name: rel, Version: version(b.Properties.ContentMD5, b.Properties.ETag)}
			if b.Properties.ContentLength != nil {
				o.Size = *b.Properties.ContentLength
			}
			out = append(out, o)
		}
	}
	return out, nil
}

func isFolderMarker(rel string, b *container.BlobItem) bool {
	if rel == "" || strings.HasSuffix(rel, "/") {
		return true
	}
	for k, v := range b.Metadata {
		if strings.EqualFold(k, "hdi_isfolder") && v != nil && strings.EqualFold(*v, "true") {
			return true
		}
	}
	return false
}

// DownloadFile writes the blob at p to the file dst through a temporary
// file, so an interrupted download never leaves a partial dst.
func (s *Store) DownloadFile(ctx context.Context, p, dst string) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".part-*")
	if err != nil {
		return 0, err
	}
	n, err := s.c.NewBlobClient(p).DownloadFile(ctx, f, &blob.DownloadFileOptions{
		RetryReaderOptionsPerBlock: blob.RetryReaderOptions{MaxRetries: int32(retry.MaxRetries)},
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
		return 0, s.explain(err, p)
	}
	return n, nil
}

// UploadFile uploads the local file src as the block blob p.
func (s *Store) UploadFile(ctx context.Context, src, p string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = s.c.NewBlockBlobClient(p).UploadFile(ctx, f, &blockblob.UploadFileOptions{})
	return s.explain(err, p)
}

// UploadBytes writes b as the block blob p.
func (s *Store) UploadBytes(ctx context.Context, p string, b []byte) error {
	_, err := s.c.NewBlockBlobClient(p).UploadBuffer(ctx, b, nil)
	return s.explain(err, p)
}

// ReadBytes reads the blob p whole.
func (s *Store) ReadBytes(ctx context.Context, p string) ([]byte, error) {
	resp, err := s.c.NewBlobClient(p).DownloadStream(ctx, nil)
	if err != nil {
		return nil, s.explain(err, p)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, s.explain(err, p)
}

// UploadTree uploads every file under the local folder src below the
// folder p, and returns how many it uploaded.
func (s *Store) UploadTree(ctx context.Context, src, p string) (int, error) {
	n := 0
	prefix := strings.Trim(p, "/")
	err := filepath.WalkDir(src, func(file string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(src, file)
		if err != nil {
			return err
		}
		name := path.Join(prefix, filepath.ToSlash(rel))
		if err := s.UploadFile(ctx, file, name); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}

// CreateContainer creates the container if it does not exist.
func (s *Store) CreateContainer(ctx context.Context) error {
	_, err := s.c.Create(ctx, nil)
	if bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return nil
	}
	return s.explain(err, "")
}

// Upload writes what r holds as the block blob p. The blob appears whole
// when r is read to its end, and not at all when reading r fails.
func (s *Store) Upload(ctx context.Context, p string, r io.Reader) error {
	_, err := s.c.NewBlockBlobClient(p).UploadStream(ctx, r, nil)
	return s.explain(err, p)
}

// Open reads the blob p and returns its size; an error wrapping
// fs.ErrNotExist when there is none.
func (s *Store) Open(ctx context.Context, p string) (io.ReadCloser, int64, error) {
	resp, err := s.c.NewBlobClient(p).DownloadStream(ctx, nil)
	if err != nil {
		return nil, 0, s.explain(err, p)
	}
	var n int64
	if resp.ContentLength != nil {
		n = *resp.ContentLength
	}
	return resp.Body, n, nil
}

// Exists reports whether p is a blob or a folder holding blobs or a
// folder marker.
func (s *Store) Exists(ctx context.Context, p string) (bool, error) {
	if _, err := s.c.NewBlobClient(p).GetProperties(ctx, nil); err == nil {
		return true, nil
	} else if !bloberror.HasCode(err, bloberror.BlobNotFound) && !isNotFoundStatus(err) {
		return false, s.explain(err, p)
	}
	prefix := strings.Trim(p, "/") + "/"
	one := int32(1)
	page, err := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, MaxResults: &one}).NextPage(ctx)
	if err != nil {
		return false, s.explain(err, p)
	}
	return len(page.Segment.BlobItems) > 0, nil
}

// isNotFoundStatus reports a 404 without an error code (a HEAD request's
// answer has no body to carry one).
func isNotFoundStatus(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == 404 && re.ErrorCode != string(bloberror.ContainerNotFound)
}

// Delete removes the blob p and every blob under the folder p.
func (s *Store) Delete(ctx context.Context, p string) error {
	prefix := strings.Trim(p, "/")
	names := []string{prefix}
	folder := prefix + "/"
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &folder})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return s.explain(err, p)
		}
		for _, b := range page.Segment.BlobItems {
			if b.Name != nil {
				names = append(names, *b.Name)
			}
		}
	}
	for _, n := range names {
		if _, err := s.c.NewBlobClient(n).Delete(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) && !isNotFoundStatus(err) {
			return s.explain(err, n)
		}
	}
	return nil
}
