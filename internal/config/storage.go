package config

import (
	"fmt"
	"path/filepath"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// StorageDatastore is where the server keeps its own files (artifacts,
// code and data snapshots, checkpoints), described as a datastore: the
// storage section, else the data dir. Replicas on different machines
// share one blob container (type azure_blob) instead of a file system.
func (c *Server) StorageDatastore() *api.Datastore {
	s := c.Storage
	d := &api.Datastore{Name: "storage", Type: s.Type, Path: s.Path,
		AccountName: s.AccountName, ContainerName: s.ContainerName, Endpoint: s.Endpoint, Protocol: s.Protocol, EndpointURL: s.EndpointURL}
	if d.Type == "" {
		d.Type = api.DatastoreLocal
	}
	if d.Type == api.DatastoreLocal && d.Path == "" {
		d.Path = c.DataDir
	}
	if s.AccountKey != "" || s.SASToken != "" {
		d.Credentials = &api.DatastoreCredentials{AccountKey: s.AccountKey, SASToken: s.SASToken}
	}
	return d
}

func (c *Server) validateStorage() error {
	d := c.StorageDatastore()
	if d.Type == api.DatastoreLocal && !filepath.IsAbs(d.Path) {
		abs, err := filepath.Abs(d.Path)
		if err != nil {
			return fmt.Errorf("storage.path: %w", err)
		}
		d.Path = abs
	}
	if err := spec.ValidateDatastore(d); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// SecretKeyPath is the secret key's file: secrets_key_file, else
// DATA_DIR/secrets.key.
func (c *Server) SecretKeyPath() string {
	if c.SecretsKeyFile != "" {
		return c.SecretsKeyFile
	}
	return filepath.Join(c.DataDir, "secrets.key")
}
