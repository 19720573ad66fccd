package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"strconv"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// GetDataAsset implements store.Tx.
func (x *tx) GetDataAsset(ctx context.Context, workspace, name, version string) (*api.DataAsset, error) {
	var doc string
	var etag int64
	err := x.tx.QueryRow(ctx, `SELECT etag, doc FROM data_assets WHERE workspace = $1 AND name = $2 AND version = $3`,
		workspace, name, version).Scan(&etag, &doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.NotFound("data asset", name+":"+version)
	}
	if err != nil {
		return nil, fmt.Errorf("getting data asset %s:%s: %w", name, version, err)
	}
	var e api.DataAsset
	if err := json.Unmarshal([]byte(doc), &e); err != nil {
		return nil, fmt.Errorf("decoding data asset %s:%s: %w", name, version, err)
	}
	e.Etag = strconv.FormatInt(etag, 10)
	return &e, nil
}

// ListDataAssets implements store.Tx.
func (x *tx) ListDataAssets(ctx context.Context, workspace, name string) ([]api.DataAsset, error) {
	var rows pgx.Rows
	var err error
	if name == "" {
		rows, err = x.tx.Query(ctx, `SELECT etag, doc FROM data_assets WHERE workspace = $1 ORDER BY name, created`, workspace)
	} else {
		rows, err = x.tx.Query(ctx, `SELECT etag, doc FROM data_assets WHERE workspace = $1 AND name = $2 ORDER BY created`, workspace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("listing data_assets: %w", err)
	}
	return scanDocs(rows, "data_assets", func(e *api.DataAsset, etag int64) { e.Etag = strconv.FormatInt(etag, 10) })
}

// PutDataAsset implements store.Tx.
func (x *tx) PutDataAsset(ctx context.Context, e *api.DataAsset, ifMatch string) error {
	id := e.Name + ":" + e.Version
	if e.Name == "" || e.Version == "" || e.Workspace == "" {
		return fmt.Errorf("data asset %q in workspace %q: name, version and workspace must be set", id, e.Workspace)
	}
	var stored, created int64
	err := x.tx.QueryRow(ctx, `SELECT etag, created FROM data_assets WHERE workspace = $1 AND name = $2 AND version = $3`,
		e.Workspace, e.Name, e.Version).Scan(&stored, &created)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("putting data asset %s: %w", id, err)
	}
	if err := checkEtag("data asset", id, found, stored, ifMatch); err != nil {
		return err
	}
	if !found {
		if err := x.requireWorkspace(ctx, e.Workspace); err != nil {
			return fmt.Errorf("data asset %s: %w", id, err)
		}
	}
	c := *e
	c.Etag, c.CreatedOn = "", c.CreatedOn.UTC()
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding data asset %s: %w", id, err)
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	if !found {
		created = rev
	}
	_, err = x.tx.Exec(ctx, `INSERT INTO data_assets (workspace, name, version, created, etag, doc) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (workspace, name, version) DO UPDATE SET etag = excluded.etag, doc = excluded.doc`,
		e.Workspace, e.Name, e.Version, created, rev, string(doc))
	if err != nil {
		return fmt.Errorf("putting data asset %s: %w", id, err)
	}
	e.Etag = strconv.FormatInt(rev, 10)
	return nil
}

// DeleteDataAsset implements store.Tx.
func (x *tx) DeleteDataAsset(ctx context.Context, workspace, name, version string) error {
	return x.deleteOne(ctx, "data asset", name+":"+version,
		`DELETE FROM data_assets WHERE workspace = $1 AND name = $2 AND version = $3`, workspace, name, version)
}
