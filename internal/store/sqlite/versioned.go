package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tideml/tide/internal/store"
)

// versioned is a table of versioned, immutable documents keyed by
// workspace, name and version: environments, components, data assets.
// Its columns are workspace, name, version, created (the revision it was
// first stored at, which orders versions), etag and doc.
type versioned[T any] struct {
	table, kind string
	// fields returns the document's etag and creation time (to be set)
	// and its key.
	fields func(*T) (etag *string, created *time.Time, workspace, name, version string)
}

func (v versioned[T]) get(ctx context.Context, x *tx, workspace, name, version string) (*T, error) {
	var doc string
	var etag int64
	id := name + ":" + version
	err := x.queryRow(ctx, `SELECT etag, doc FROM `+v.table+` WHERE workspace = ? AND name = ? AND version = ?`,
		workspace, name, version).Scan(&etag, &doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound(v.kind, id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s %s: %w", v.kind, id, err)
	}
	var e T
	if err := json.Unmarshal([]byte(doc), &e); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w", v.kind, id, err)
	}
	tag, _, _, _, _ := v.fields(&e)
	*tag = strconv.FormatInt(etag, 10)
	return &e, nil
}

// list returns the workspace's documents (of one name, if set), oldest
// version first.
func (v versioned[T]) list(ctx context.Context, x *tx, workspace, name string) ([]T, error) {
	var rows *sql.Rows
	var err error
	if name == "" {
		rows, err = x.query(ctx, `SELECT etag, doc FROM `+v.table+` WHERE workspace = ? ORDER BY name, created`, workspace)
	} else {
		rows, err = x.query(ctx, `SELECT etag, doc FROM `+v.table+` WHERE workspace = ? AND name = ? ORDER BY created`, workspace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", v.table, err)
	}
	return scanDocs(rows, v.table, func(e *T, etag int64) {
		tag, _, _, _, _ := v.fields(e)
		*tag = strconv.FormatInt(etag, 10)
	})
}

// put stores e (if ifMatch is set, only over that etag) and sets its etag.
func (v versioned[T]) put(ctx context.Context, x *tx, e *T, ifMatch string) error {
	_, _, ws, name, version := v.fields(e)
	id := name + ":" + version
	if name == "" || version == "" || ws == "" {
		return fmt.Errorf("%s %q in workspace %q: name, version and workspace must be set", v.kind, id, ws)
	}
	var stored, created int64
	err := x.queryRow(ctx, `SELECT etag, created FROM `+v.table+` WHERE workspace = ? AND name = ? AND version = ?`,
		ws, name, version).Scan(&stored, &created)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("putting %s %s: %w", v.kind, id, err)
	}
	if err := checkEtag(v.kind, id, found, stored, ifMatch); err != nil {
		return err
	}
	if !found {
		if err := x.requireWorkspace(ctx, ws); err != nil {
			return fmt.Errorf("%s %s: %w", v.kind, id, err)
		}
	}
	c := *e
	tag, on, _, _, _ := v.fields(&c)
	*tag, *on = "", on.UTC()
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", v.kind, id, err)
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	if !found {
		created = rev
	}
	_, err = x.exec(ctx, `INSERT INTO `+v.table+` (workspace, name, version, created, etag, doc) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (workspace, name, version) DO UPDATE SET etag = excluded.etag, doc = excluded.doc`,
		ws, name, version, created, rev, string(doc))
	if err != nil {
		return fmt.Errorf("putting %s %s: %w", v.kind, id, err)
	}
	tag, _, _, _, _ = v.fields(e)
	*tag = strconv.FormatInt(rev, 10)
	return nil
}

func (v versioned[T]) delete(ctx context.Context, x *tx, workspace, name, version string) error {
	return x.deleteOne(ctx, v.kind, name+":"+version,
		`DELETE FROM `+v.table+` WHERE workspace = ? AND name = ? AND version = ?`, workspace, name, version)
}
