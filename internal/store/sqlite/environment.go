package sqlite

import (
	"context"
	"time"

	"github.com/tideml/tide/api"
)

var environments = versioned[api.Environment]{table: "environments", kind: "environment",
	fields: func(e *api.Environment) (*string, *time.Time, string, string, string) {
		return &e.Etag, &e.CreatedOn, e.Workspace, e.Name, e.Version
	}}

// GetEnvironment implements store.Tx.
func (x *tx) GetEnvironment(ctx context.Context, workspace, name, version string) (*api.Environment, error) {
	return environments.get(ctx, x, workspace, name, version)
}

// ListEnvironments implements store.Tx.
func (x *tx) ListEnvironments(ctx context.Context, workspace, name string) ([]api.Environment, error) {
	return environments.list(ctx, x, workspace, name)
}

// PutEnvironment implements store.Tx.
func (x *tx) PutEnvironment(ctx context.Context, e *api.Environment, ifMatch string) error {
	return environments.put(ctx, x, e, ifMatch)
}

// DeleteEnvironment implements store.Tx.
func (x *tx) DeleteEnvironment(ctx context.Context, workspace, name, version string) error {
	return environments.delete(ctx, x, workspace, name, version)
}
