package filestore

import (
	"context"
	"io"
	"strings"

	"github.com/tideml/tide/internal/azureblob"
)

// Blob keeps the files in an Azure blob container, one block blob each;
// an empty folder is a folder marker (an empty blob named FOLDER/).
type Blob struct {
	c *azureblob.Store
}

func (b *Blob) String() string { return b.c.URL("") }

// Put implements Store: the block list is committed once r is read
// whole, so the blob changes at once.
func (b *Blob) Put(ctx context.Context, name string, r io.Reader) error {
	if err := validName(name); err != nil {
		return err
	}
	return b.c.Upload(ctx, name, r)
}

// Open implements Store.
func (b *Blob) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if err := validName(name); err != nil {
		return nil, 0, err
	}
	return b.c.Open(ctx, name)
}

// List implements Store.
func (b *Blob) List(ctx context.Context, name string) ([]File, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	objs, err := b.c.List(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]File, 0, len(objs))
	for _, o := range objs {
		out = append(out, File{Name: o.Name, Size: o.Size})
	}
	return out, nil
}

// Exists implements Store.
func (b *Blob) Exists(ctx context.Context, name string) (bool, error) {
	if err := validName(name); err != nil {
		return false, err
	}
	return b.c.Exists(ctx, name)
}

// MakeFolder implements Store.
func (b *Blob) MakeFolder(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	return b.c.UploadBytes(ctx, strings.TrimSuffix(name, "/")+"/", nil)
}

// Delete implements Store.
func (b *Blob) Delete(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	return b.c.Delete(ctx, name)
}
