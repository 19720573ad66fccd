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
	rows, err := x.tx.QueryContext(ctx, `SELECT etag, doc FROM datastores WHERE workspace = ? AND name = ?`, workspace, name)
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
	rows, err := x.tx.QueryContext(ctx, `SELECT etag, doc FROM datastores WHERE workspace = ? ORDER BY name`, workspace)
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
	var stored int64
	err := x.tx.QueryRowContext(ctx, `SELECT etag FROM datastores WHERE workspace = ? AND name = ?`, d.Workspace, d.Name).Scan(&stored)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("putting datastore %s: %w", d.Name, err)
	}
	if err := checkEtag("datastore", d.Name, found, stored, ifMatch); err != nil {
		return err
	}
	if !found {
		if err := x.requireWorkspace(ctx, d.Workspace); err != nil {
			return fmt.Errorf("datastore %s: %w", d.Name, err)
		}
	}
	c := *d
	c.Etag, c.CreatedOn = "", c.CreatedOn.UTC()
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding datastore %s: %w", d.Name, err)
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	_, err = x.tx.ExecContext(ctx, `INSERT INTO datastores (workspace, name, etag, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (workspace, name) DO UPDATE SET etag = excluded.etag, doc = excluded.doc`, d.Workspace, d.Name, rev, string(doc))
	if err != nil {
		return fmt.Errorf("putting datastore %s: %w", d.Name, err)
	}
	d.Etag = strconv.FormatInt(rev, 10)
	return nil
}

// DeleteDatastore implements store.Tx.
func (x *tx) DeleteDatastore(ctx context.Context, workspace, name string) error {
	return x.deleteOne(ctx, "datastore", name, `DELETE FROM datastores WHERE workspace = ? AND name = ?`, workspace, name)
}
