package provider

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// Deps are what every provider may need from the server.
type Deps struct {
	Logger *slog.Logger
	// DataDir is the server's data folder; a provider keeps its state under
	// DataDir/<provider name>/ or similar.
	DataDir string
}

// Factory builds a provider from its settings (the location's settings in
// the server configuration). name is the location's provider name.
type Factory func(name string, settings map[string]any, deps Deps) (Provider, error)

// Registry maps provider names to factories, so the server configuration
// builds providers by name. The builtin providers are in package
// provider/builtin (they import this package, so the map cannot live here).
type Registry map[string]Factory

// New builds the provider called name.
func (r Registry) New(name string, settings map[string]any, deps Deps) (Provider, error) {
	f, ok := r[name]
	if !ok {
		return nil, fmt.Errorf("provider %q: unknown provider; known: %s", name, strings.Join(r.Names(), ", "))
	}
	p, err := f(name, settings, deps)
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	return p, nil
}

// Names lists the registered provider names in order.
func (r Registry) Names() []string {
	names := make([]string, 0, len(r))
	for n := range r {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
