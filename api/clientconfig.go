package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ClientConfig is what the CLI and the Go client need to reach a server:
// one server's address, token, workspace and, for a server with its own
// certificate authority, that CA's fingerprint.
type ClientConfig struct {
	Server    string `json:"server"`
	Token     string `json:"token"`
	Workspace string `json:"workspace,omitempty"`
	// CAFingerprint is the SHA-256 (hex) of the certificate authority the
	// server's certificate must chain to; empty trusts the system's CAs.
	CAFingerprint string `json:"ca_fingerprint,omitempty"`
}

// ClientConfigFile is the CLI's configuration file: several servers as
// named contexts (kubectl style) and the one in use. A server writes only
// its own context on its first start, so two servers on one machine never
// overwrite each other's tokens.
type ClientConfigFile struct {
	CurrentContext string                  `json:"current_context,omitempty"`
	Contexts       map[string]ClientConfig `json:"contexts,omitempty"`
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

// ContextName is the context a server at serverURL is written under: its
// host and port ("127.0.0.1:7430").
func ContextName(serverURL string) string {
	if u, err := url.Parse(serverURL); err == nil && u.Host != "" {
		return u.Host
	}
	return serverURL
}

// LoadClientConfigFile reads the configuration file. A missing file is an
// empty configuration; a file from before contexts (one server's fields at
// the top) becomes one context.
func LoadClientConfigFile(path string) (ClientConfigFile, error) {
	var f ClientConfigFile
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(f.Contexts) == 0 {
		var old ClientConfig
		if json.Unmarshal(b, &old) == nil && old.Server != "" {
			name := ContextName(old.Server)
			f = ClientConfigFile{CurrentContext: name, Contexts: map[string]ClientConfig{name: old}}
		}
	}
	return f, nil
}

// Context returns the named context, or the current one when name is "".
// No contexts at all is an empty configuration, not an error.
func (f ClientConfigFile) Context(name string) (ClientConfig, error) {
	if name == "" {
		name = f.CurrentContext
	}
	if len(f.Contexts) == 0 && name == "" {
		return ClientConfig{}, nil
	}
	c, ok := f.Contexts[name]
	if !ok {
		return c, fmt.Errorf("context %q not found; the contexts are: %s (see 'tide config get-contexts')", name, strings.Join(f.Names(), ", "))
	}
	return c, nil
}

// Names lists the contexts, sorted.
func (f ClientConfigFile) Names() []string {
	var out []string
	for n := range f.Contexts {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// LoadClientConfig reads the current context of a configuration file.
func LoadClientConfig(path string) (ClientConfig, error) {
	f, err := LoadClientConfigFile(path)
	if err != nil {
		return ClientConfig{}, err
	}
	return f.Context("")
}

// SaveClientConfigFile writes the configuration readable by its owner
// only, since it holds tokens.
func SaveClientConfigFile(path string, f ClientConfigFile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// SaveClientConfig writes c as the context name, keeping the others; it
// becomes the current context when there is none. It reports whether it is
// the current context afterwards.
func SaveClientConfig(path, name string, c ClientConfig) (current bool, err error) {
	f, err := LoadClientConfigFile(path)
	if err != nil {
		return false, err
	}
	if f.Contexts == nil {
		f.Contexts = map[string]ClientConfig{}
	}
	f.Contexts[name] = c
	if _, ok := f.Contexts[f.CurrentContext]; !ok {
		f.CurrentContext = name
	}
	return f.CurrentContext == name, SaveClientConfigFile(path, f)
}
