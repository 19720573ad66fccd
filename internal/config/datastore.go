package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// DefaultDatastoreNames are the datastores every workspace has, as in
// Azure ML: workspaceblobstore (where data and outputs go by default) and
// workspaceartifactstore.
var DefaultDatastoreNames = []string{"workspaceblobstore", "workspaceartifactstore"}

// DatastoreConfig points a default datastore somewhere else than its
// local folder: the fields of a datastore YAML file, without name.
type DatastoreConfig struct {
	// Type is local or azure_blob.
	Type string `yaml:"type"`
	// Path is a local datastore's folder, the same on every node.
	Path string `yaml:"path"`
	// AccountName, ContainerName, Endpoint, Protocol and EndpointURL
	// locate an azure_blob container; AccountKey or SASToken is its
	// secret. Every workspace's datastore of this name is this container.
	AccountName   string `yaml:"account_name"`
	ContainerName string `yaml:"container_name"`
	Endpoint      string `yaml:"endpoint"`
	Protocol      string `yaml:"protocol"`
	EndpointURL   string `yaml:"endpoint_url"`
	AccountKey    string `yaml:"account_key"`
	SASToken      string `yaml:"sas_token"`
}

// DefaultDatastore returns workspace ws's default datastore name: the one
// default_datastores configures, else the local folder
// DATA_DIR/datastores/WS/NAME (which nodes on the server's host read).
func (c *Server) DefaultDatastore(ws, name string) *api.Datastore {
	d := &api.Datastore{Name: name, Workspace: ws, Type: api.DatastoreLocal,
		Description: "the workspace's default datastore (server config default_datastores)",
		Path:        filepath.Join(c.DataDir, "datastores", ws, name)}
	dc, ok := c.DefaultDatastores[name]
	if !ok {
		return d
	}
	d.Type, d.Path = dc.Type, dc.Path
	d.AccountName, d.ContainerName, d.Endpoint, d.Protocol, d.EndpointURL = dc.AccountName, dc.ContainerName, dc.Endpoint, dc.Protocol, dc.EndpointURL
	if dc.AccountKey != "" || dc.SASToken != "" {
		d.Credentials = &api.DatastoreCredentials{AccountKey: dc.AccountKey, SASToken: dc.SASToken}
	}
	return d
}

func (c *Server) validateDatastores() error {
	names := make([]string, 0, len(c.DefaultDatastores))
	for name := range c.DefaultDatastores {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !slices.Contains(DefaultDatastoreNames, name) {
			return fmt.Errorf("default_datastores.%s: not a default datastore; configure workspaceblobstore or workspaceartifactstore (register others with 'tide datastore create')", name)
		}
		if err := spec.ValidateDatastore(c.DefaultDatastore("ws", name)); err != nil {
			return fmt.Errorf("default_datastores.%s: %w", name, err)
		}
	}
	return nil
}
