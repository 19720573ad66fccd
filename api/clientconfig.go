package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ClientConfig is what the CLI and the Go client need to reach a server. The
// server writes one on its first start, so `tide` on the same machine works
// with no flags.
type ClientConfig struct {
	Server    string `json:"server"`
	Token     string `json:"token"`
	Workspace string `json:"workspace,omitempty"`
}

// DefaultWorkspace is the workspace every server has.
const DefaultWorkspace = "default"

// DefaultConfigPath is $XDG_CONFIG_HOME/tide/config.json (or the platform's
// user configuration folder).
func DefaultConfigPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the user config folder: %w", err)
	}
	return filepath.Join(dir, "tide", "config.json"), nil
}

// LoadClientConfig reads a client configuration. A missing file is an empty
// configuration, not an error.
func LoadClientConfig(path string) (ClientConfig, error) {
	var c ClientConfig
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("reading %s: %w", path, err)
	}
	return c, nil
}

// SaveClientConfig writes a client configuration readable by its owner only,
// since it holds a token.
func SaveClientConfig(path string, c ClientConfig) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
