package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// ListTokens implements store.Tx.
func (x *tx) ListTokens(ctx context.Context) ([]store.Token, error) {
	rows, err := x.tx.Query(ctx, `SELECT doc FROM tokens ORDER BY hash`)
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
	err := x.tx.QueryRow(ctx, `SELECT doc FROM objects WHERE kind = $1 AND key = $2`, kind, key).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.NotFound(kind, key)
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s %s: %w", kind, key, err)
	}
	return []byte(doc), nil
}

// PutObject implements store.Tx.
func (x *tx) PutObject(ctx context.Context, kind, key string, doc []byte) error {
	_, err := x.tx.Exec(ctx, `INSERT INTO objects (kind, key, doc) VALUES ($1, $2, $3)
		ON CONFLICT (kind, key) DO UPDATE SET doc = excluded.doc`, kind, key, string(doc))
	if err != nil {
		return fmt.Errorf("putting %s %s: %w", kind, key, err)
	}
	return nil
}

// DeleteObject implements store.Tx.
func (x *tx) DeleteObject(ctx context.Context, kind, key string) error {
	return x.deleteOne(ctx, kind, key, `DELETE FROM objects WHERE kind = $1 AND key = $2`, kind, key)
}

// ListObjects implements store.Tx.
func (x *tx) ListObjects(ctx context.Context, kind, prefix string) ([][]byte, error) {
	rows, err := x.tx.Query(ctx, `SELECT key, doc FROM objects WHERE kind = $1 AND key COLLATE "C" >= $2 ORDER BY key COLLATE "C"`, kind, prefix)
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

// AddAudit implements store.Tx: one statement, the entries as arrays. Their
// seqs are taken in the order of the arrays, so the returned ones, sorted,
// are theirs.
func (x *tx) AddAudit(ctx context.Context, es []api.AuditEntry) error {
	if len(es) == 0 {
		return nil
	}
	ats, users, docs := make([]time.Time, len(es)), make([]string, len(es)), make([]string, len(es))
	for i, e := range es {
		e.Seq = 0
		doc, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encoding audit entry: %w", err)
		}
		ats[i], users[i], docs[i] = pgTime(e.Time), e.User, string(doc)
	}
	rows, err := x.tx.Query(ctx, `INSERT INTO audit (at, "user", doc)
		SELECT a.at, a.u, a.doc::jsonb FROM unnest($1::timestamptz[], $2::text[], $3::text[]) WITH ORDINALITY AS a(at, u, doc, n)
		ORDER BY a.n RETURNING seq`, ats, users, docs)
	if err != nil {
		return fmt.Errorf("adding %d audit entries: %w", len(es), err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(seqs) != len(es) {
		return fmt.Errorf("adding %d audit entries: %d written: %w", len(es), len(seqs), err)
	}
	slices.Sort(seqs)
	for i := range es {
		es[i].Seq = seqs[i]
	}
	return nil
}

// ListAudit implements store.Tx.
func (x *tx) ListAudit(ctx context.Context, f store.AuditFilter) ([]api.AuditEntry, error) {
	limit := any(nil)
	if f.Limit > 0 {
		limit = f.Limit
	}
	rows, err := x.tx.Query(ctx, `SELECT seq, doc FROM audit WHERE ($1 = '' OR "user" = $1) AND at >= $2
		ORDER BY seq DESC LIMIT $3`, f.User, pgTime(f.Since), limit)
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
