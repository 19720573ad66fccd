package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// GetDatastore implements store.Tx.
func (x *tx) GetDatastore(ctx context.Context, workspace, name string) (*api.Datastore, error) {
	rows, err := x.query(ctx, `SELECT etag, doc FROM datastores WHERE workspace = ? AND name = ?`, workspace, name)
	if err != nil {
		return nil, fmt.Errorf("getting datastore %s: %w", name, err)
	}
	ds, err := scanDocs(rows, "datastores", setDatastoreEtag)
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return nil, store.NotFound("datastore", name)
	}
	return &ds[0], nil
}

// ListDatastores implements store.Tx.
func (x *tx) ListDatastores(ctx context.Context, workspace string) ([]api.Datastore, error) {
	rows, err := x.query(ctx, `SELECT etag, doc FROM datastores WHERE workspace = ? ORDER BY name`, workspace)
	if err != nil {
		return nil, fmt.Errorf("listing datastores: %w", err)
	}
	return scanDocs(rows, "datastores", setDatastoreEtag)
}

func setDatastoreEtag(d *api.Datastore, etag int64) { d.Etag = strconv.FormatInt(etag, 10) }

// PutDatastore implements store.Tx.
func (x *tx) PutDatastore(ctx context.Context, d *api.Datastore, ifMatch string) error {
	if d.Name == "" || d.Workspace == "" {
		return fmt.Errorf("datastore %q in workspace %q: name and workspace must be set", d.Name, d.Workspace)
	}
	c := *d
	c.Etag, c.CreatedOn = "", c.CreatedOn.UTC()
	etag, err := x.putDoc(ctx, "datastores", "datastore", d.Workspace, d.Name, c, ifMatch)
	if err != nil {
		return err
	}
	d.Etag = etag
	return nil
}

// putDoc creates or replaces the document of a workspace resource in table
// (columns workspace, name, etag, doc) under the Put methods' etag rules,
// and returns the new etag.
func (x *tx) putDoc(ctx context.Context, table, kind, workspace, name string, v any, ifMatch string) (string, error) {
	var stored int64
	err := x.queryRow(ctx, `SELECT etag FROM `+table+` WHERE workspace = ? AND name = ?`, workspace, name).Scan(&stored)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("putting %s %s: %w", kind, name, err)
	}
	if err := checkEtag(kind, name, found, stored, ifMatch); err != nil {
		return "", err
	}
	if !found {
		if err := x.requireWorkspace(ctx, workspace); err != nil {
			return "", fmt.Errorf("%s %s: %w", kind, name, err)
		}
	}
	doc, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding %s %s: %w", kind, name, err)
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return "", err
	}
	_, err = x.exec(ctx, `INSERT INTO `+table+` (workspace, name, etag, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (workspace, name) DO UPDATE SET etag = excluded.etag, doc = excluded.doc`, workspace, name, rev, string(doc))
	if err != nil {
		return "", fmt.Errorf("putting %s %s: %w", kind, name, err)
	}
	return strconv.FormatInt(rev, 10), nil
}

// DeleteDatastore implements store.Tx.
func (x *tx) DeleteDatastore(ctx context.Context, workspace, name string) error {
	return x.deleteOne(ctx, "datastore", name, `DELETE FROM datastores WHERE workspace = ? AND name = ?`, workspace, name)
}
