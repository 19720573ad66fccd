// Package builtin lists the providers compiled into tide, by name, so the
// server configuration can build a location's provider from its name. It is
// separate from package provider because the providers import that package.
package builtin

import (
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/docker"
	"github.com/tideml/tide/internal/provider/fake"
	"github.com/tideml/tide/internal/provider/kubernetes"
	"github.com/tideml/tide/internal/provider/local"
	"github.com/tideml/tide/internal/provider/slurm"
	"github.com/tideml/tide/internal/provider/ssh"
)

// Providers returns the builtin providers. "fake" is a programmable,
// in-memory provider for tests and demos of the controller; "docker" runs
// each node in a container.
func Providers() provider.Registry {
	return provider.Registry{
		local.Name:      local.Factory,
		fake.Name:       fake.Factory,
		docker.Name:     docker.Factory,
		ssh.Name:        ssh.Factory,
		slurm.Name:      slurm.Factory,
		kubernetes.Name: kubernetes.Factory,
	}
}
