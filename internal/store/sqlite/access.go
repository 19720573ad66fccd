package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// ListTokens implements store.Tx.
func (x *tx) ListTokens(ctx context.Context) ([]store.Token, error) {
	rows, err := x.query(ctx, `SELECT doc FROM tokens ORDER BY hash`)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	defer rows.Close()
	var out []store.Token
	for rows.Next() {
		var doc string
		var t store.Token
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("listing tokens: %w", err)
		}
		if err := json.Unmarshal([]byte(doc), &t); err != nil {
			return nil, fmt.Errorf("decoding token: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// GetObject implements store.Tx.
func (x *tx) GetObject(ctx context.Context, kind, key string) ([]byte, error) {
	var doc string
	err := x.queryRow(ctx, `SELECT doc FROM objects WHERE kind = ? AND key = ?`, kind, key).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound(kind, key)
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s %s: %w", kind, key, err)
	}
	return []byte(doc), nil
}

// PutObject implements store.Tx.
func (x *tx) PutObject(ctx context.Context, kind, key string, doc []byte) error {
	_, err := x.exec(ctx, `INSERT INTO objects (kind, key, doc) VALUES (?, ?, ?)
		ON CONFLICT (kind, key) DO UPDATE SET doc = excluded.doc`, kind, key, string(doc))
	if err != nil {
		return fmt.Errorf("putting %s %s: %w", kind, key, err)
	}
	return nil
}

// DeleteObject implements store.Tx.
func (x *tx) DeleteObject(ctx context.Context, kind, key string) error {
	return x.deleteOne(ctx, kind, key, `DELETE FROM objects WHERE kind = ? AND key = ?`, kind, key)
}

// ListObjects implements store.Tx.
func (x *tx) ListObjects(ctx context.Context, kind, prefix string) ([][]byte, error) {
	rows, err := x.query(ctx, `SELECT key, doc FROM objects WHERE kind = ? AND key >= ? ORDER BY key`, kind, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", kind, err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var key, doc string
		if err := rows.Scan(&key, &doc); err != nil {
			return nil, fmt.Errorf("listing %s: %w", kind, err)
		}
		if !strings.HasPrefix(key, prefix) {
			break
		}
		out = append(out, []byte(doc))
	}
	return out, rows.Err()
}

// AddAudit implements store.Tx: a statement per entry (SQLite runs in the
// process, so one statement of many saves no round trip).
func (x *tx) AddAudit(ctx context.Context, es []api.AuditEntry) error {
	for i := range es {
		e := &es[i]
		c := *e
		c.Seq = 0
		doc, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encoding audit entry: %w", err)
		}
		res, err := x.exec(ctx, `INSERT INTO audit (at, user, doc) VALUES (?, ?, ?)`, formatTime(e.Time), e.User, string(doc))
		if err != nil {
			return fmt.Errorf("adding an audit entry: %w", err)
		}
		if e.Seq, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("adding an audit entry: %w", err)
		}
	}
	return nil
}

// ListAudit implements store.Tx.
func (x *tx) ListAudit(ctx context.Context, f store.AuditFilter) ([]api.AuditEntry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	since := ""
	if !f.Since.IsZero() {
		since = formatTime(f.Since)
	}
	rows, err := x.query(ctx, `SELECT seq, doc FROM audit WHERE (? = '' OR user = ?) AND at >= ?
		ORDER BY seq DESC LIMIT ?`, f.User, f.User, since, limit)
	if err != nil {
		return nil, fmt.Errorf("listing the audit log: %w", err)
	}
	defer rows.Close()
	var out []api.AuditEntry
	for rows.Next() {
		var doc string
		var e api.AuditEntry
		var seq int64
		if err := rows.Scan(&seq, &doc); err != nil {
			return nil, fmt.Errorf("listing the audit log: %w", err)
		}
		if err := json.Unmarshal([]byte(doc), &e); err != nil {
			return nil, fmt.Errorf("decoding audit entry %d: %w", seq, err)
		}
		e.Seq = seq
		out = append(out, e)
	}
	return out, rows.Err()
}
