package postgres

import (
	"context"
	"time"

	"github.com/tideml/tide/api"
)

var dataAssets = versioned[api.DataAsset]{table: "data_assets", kind: "data asset",
	fields: func(e *api.DataAsset) (*string, *time.Time, string, string, string) {
		return &e.Etag, &e.CreatedOn, e.Workspace, e.Name, e.Version
	}}

// GetDataAsset implements store.Tx.
func (x *tx) GetDataAsset(ctx context.Context, workspace, name, version string) (*api.DataAsset, error) {
	return dataAssets.get(ctx, x, workspace, name, version)
}

// ListDataAssets implements store.Tx.
func (x *tx) ListDataAssets(ctx context.Context, workspace, name string) ([]api.DataAsset, error) {
	return dataAssets.list(ctx, x, workspace, name)
}

// PutDataAsset implements store.Tx.
func (x *tx) PutDataAsset(ctx context.Context, e *api.DataAsset, ifMatch string) error {
	return dataAssets.put(ctx, x, e, ifMatch)
}

// DeleteDataAsset implements store.Tx.
func (x *tx) DeleteDataAsset(ctx context.Context, workspace, name, version string) error {
	return dataAssets.delete(ctx, x, workspace, name, version)
}
