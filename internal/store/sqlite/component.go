package sqlite

import (
	"context"
	"time"

	"github.com/tideml/tide/api"
)

var components = versioned[api.Component]{table: "components", kind: "component",
	fields: func(e *api.Component) (*string, *time.Time, string, string, string) {
		return &e.Etag, &e.CreatedOn, e.Workspace, e.Name, e.Version
	}}

// GetComponent implements store.Tx.
func (x *tx) GetComponent(ctx context.Context, workspace, name, version string) (*api.Component, error) {
	return components.get(ctx, x, workspace, name, version)
}

// ListComponents implements store.Tx.
func (x *tx) ListComponents(ctx context.Context, workspace, name string) ([]api.Component, error) {
	return components.list(ctx, x, workspace, name)
}

// PutComponent implements store.Tx.
func (x *tx) PutComponent(ctx context.Context, e *api.Component, ifMatch string) error {
	return components.put(ctx, x, e, ifMatch)
}

// DeleteComponent implements store.Tx.
func (x *tx) DeleteComponent(ctx context.Context, workspace, name, version string) error {
	return components.delete(ctx, x, workspace, name, version)
}
