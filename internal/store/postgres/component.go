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

// GetComponent implements store.Tx.
func (x *tx) GetComponent(ctx context.Context, workspace, name, version string) (*api.Component, error) {
	var doc string
	var etag int64
	err := x.tx.QueryRow(ctx, `SELECT etag, doc FROM components WHERE workspace = $1 AND name = $2 AND version = $3`,
		workspace, name, version).Scan(&etag, &doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.NotFound("component", name+":"+version)
	}
	if err != nil {
		return nil, fmt.Errorf("getting component %s:%s: %w", name, version, err)
	}
	var e api.Component
	if err := json.Unmarshal([]byte(doc), &e); err != nil {
		return nil, fmt.Errorf("decoding component %s:%s: %w", name, version, err)
	}
	e.Etag = strconv.FormatInt(etag, 10)
	return &e, nil
}

// ListComponents implements store.Tx.
func (x *tx) ListComponents(ctx context.Context, workspace, name string) ([]api.Component, error) {
	var rows pgx.Rows
	var err error
	if name == "" {
		rows, err = x.tx.Query(ctx, `SELECT etag, doc FROM components WHERE workspace = $1 ORDER BY name, created`, workspace)
	} else {
		rows, err = x.tx.Query(ctx, `SELECT etag, doc FROM components WHERE workspace = $1 AND name = $2 ORDER BY created`, workspace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("listing components: %w", err)
	}
	return scanDocs(rows, "components", func(e *api.Component, etag int64) { e.Etag = strconv.FormatInt(etag, 10) })
}

// PutComponent implements store.Tx.
func (x *tx) PutComponent(ctx context.Context, e *api.Component, ifMatch string) error {
	id := e.Name + ":" + e.Version
	if e.Name == "" || e.Version == "" || e.Workspace == "" {
		return fmt.Errorf("component %q in workspace %q: name, version and workspace must be set", id, e.Workspace)
	}
	var stored, created int64
	err := x.tx.QueryRow(ctx, `SELECT etag, created FROM components WHERE workspace = $1 AND name = $2 AND version = $3`,
		e.Workspace, e.Name, e.Version).Scan(&stored, &created)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("putting component %s: %w", id, err)
	}
	if err := checkEtag("component", id, found, stored, ifMatch); err != nil {
		return err
	}
	if !found {
		if err := x.requireWorkspace(ctx, e.Workspace); err != nil {
			return fmt.Errorf("component %s: %w", id, err)
		}
	}
	c := *e
	c.Etag, c.CreatedOn = "", c.CreatedOn.UTC()
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding component %s: %w", id, err)
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	if !found {
		created = rev
	}
	_, err = x.tx.Exec(ctx, `INSERT INTO components (workspace, name, version, created, etag, doc) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (workspace, name, version) DO UPDATE SET etag = excluded.etag, doc = excluded.doc`,
		e.Workspace, e.Name, e.Version, created, rev, string(doc))
	if err != nil {
		return fmt.Errorf("putting component %s: %w", id, err)
	}
	e.Etag = strconv.FormatInt(rev, 10)
	return nil
}

// DeleteComponent implements store.Tx.
func (x *tx) DeleteComponent(ctx context.Context, workspace, name, version string) error {
	return x.deleteOne(ctx, "component", name+":"+version,
		`DELETE FROM components WHERE workspace = $1 AND name = $2 AND version = $3`, workspace, name, version)
}
