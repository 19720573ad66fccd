// Package filestore keeps the server's own files: job artifacts (outputs
// and logs agents upload), content-addressed code and data snapshots,
// checkpoints, and the outputs pipeline steps hand on. They live in a
// local folder (the data dir, by default) or in a blob container, which
// lets replicas on different machines serve each other's files without a
// shared file system. The server config's storage section chooses.
//
// Names are slash-separated paths ("artifacts/ws/job/outputs/model.pt").
// A file appears whole or not at all: readers never see half of one.
package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob"
)

// Store holds the server's files.
type Store interface {
	// Put writes what r holds as the file name, replacing any file of
	// that name at once; a failed read of r leaves the old file.
	Put(ctx context.Context, name string, r io.Reader) error
	// Open reads the file name and returns its size; an error wrapping
	// fs.ErrNotExist when there is none.
	Open(ctx context.Context, name string) (io.ReadCloser, int64, error)
	// List returns the files under the folder name, by path below it.
	List(ctx context.Context, name string) ([]File, error)
	// Exists reports whether name is a file or a folder (an empty one
	// made with MakeFolder included).
	Exists(ctx context.Context, name string) (bool, error)
	// MakeFolder records the folder name, empty or not: a job's declared
	// output it wrote nothing to is an empty folder, not a missing one.
	MakeFolder(ctx context.Context, name string) error
	// Delete removes the file name or the folder name with everything in
	// it; nothing there is no error.
	Delete(ctx context.Context, name string) error
	// String says where the files are, for messages.
	String() string
}

// File is a file found by List.
type File struct {
	// Name is the path below the listed folder, with slashes.
	Name string
	Size int64
}

// Open returns the store a datastore description points at: a local
// folder or an azure_blob container (created when missing, which also
// checks the credentials at the server's start).
func Open(ctx context.Context, ds *api.Datastore) (Store, error) {
	switch ds.Type {
	case api.DatastoreLocal:
		return NewLocal(ds.Path)
	case api.DatastoreAzureBlob:
		c, err := azureblob.New(ds)
		if err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
		if err := c.CreateContainer(ctx); errors.Is(err, azureblob.ErrAuthentication) {
			return nil, fmt.Errorf("storage: %w for account %s (%s); check storage.account_key or storage.sas_token in the server config, or TIDE_STORAGE_ACCOUNT_KEY / TIDE_STORAGE_SAS_TOKEN", azureblob.ErrAuthentication, ds.AccountName, c.URL(""))
		} else if err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
		return &Blob{c: c}, nil
	default:
		return nil, fmt.Errorf("storage.type: %q is not supported; use local or azure_blob", ds.Type)
	}
}

// validName refuses a name that would leave the store's root.
func validName(name string) error {
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("file name %q: want a relative slash-separated path", name)
	}
	return nil
}
