package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Data asset types, as in Azure ML.
const (
	DataURIFile   = "uri_file"
	DataURIFolder = "uri_folder"
	DataMLTable   = "mltable"
)

// DataAsset is one version of a named, immutable reference to data:
// jobs use it as azureml:NAME:VERSION or azureml:NAME@latest. Its path was
// resolved when it was created (a local path uploaded as blob:HEX, a
// datastore, wasbs:// or blob URL normalised to azureml://datastores/).
type DataAsset struct {
	Name        string            `json:"name"`
	Version     string            `json:"version,omitempty"`
	Type        string            `json:"type,omitempty"`
	Path        string            `json:"path"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`

	// Status, set by the server.
	// Archived versions are left out of lists and of @latest, but a job
	// may still name them by version.
	Archived  bool      `json:"archived,omitempty"`
	Workspace string    `json:"workspace,omitempty"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	Etag      string    `json:"etag,omitempty"`
}

// DataAssets lists a workspace's data assets, or the versions of name;
// archived ones only when archived is set.
func (c *Client) DataAssets(ctx context.Context, ws, name string, archived bool) ([]DataAsset, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	if archived {
		q.Set("archived", "true")
	}
	return list[DataAsset](ctx, c, v1("workspaces", ws, "data"), q)
}

// DataAsset returns one version of a data asset ("latest": the newest
// that is not archived).
func (c *Client) DataAsset(ctx context.Context, ws, name, version string) (*DataAsset, error) {
	var out DataAsset
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "data", name, "versions", version), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateDataAsset registers a version of a data asset (an empty version
// gets the next number). Versions are immutable.
func (c *Client) CreateDataAsset(ctx context.Context, ws string, d *DataAsset) (*DataAsset, error) {
	out := new(DataAsset)
	if _, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "data"), nil, d, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ArchiveDataAsset archives (or, with archived false, restores) one
// version of a data asset.
func (c *Client) ArchiveDataAsset(ctx context.Context, ws, name, version string, archived bool) (*DataAsset, error) {
	what := "archive"
	if !archived {
		what = "restore"
	}
	out := new(DataAsset)
	if _, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "data", name, "versions", version, what), nil, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}
