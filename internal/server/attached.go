package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/kubernetes"
	"github.com/tideml/tide/internal/provider/ssh"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// An attached machine's node runs through the ssh provider, built from
// the compute's record and its key's secret rather than from a location
// of the configuration; config.Attached gives the rest.

// machineHost is the ssh provider's host of attached compute c.
func (s *Server) machineHost(c *api.Compute, key string) ssh.Host {
	h := ssh.Host{Address: c.Address, User: c.SSHSettings.AdminUsername, PrivateKey: []byte(key), HostKey: c.HostKey,
		Capacity: 1, Dir: s.cfg.Attached.Dir, GPUs: c.GPUs}
	if c.SSHSettings.SSHPort != 0 {
		h.Port = c.SSHSettings.SSHPort
	}
	return h
}

// probeMachine is service.MachineProbe: it logs in with the ssh provider's
// code and names the field of the file a failure is about.
func (s *Server) probeMachine(ctx context.Context, c *api.Compute, key string) (api.VirtualMachine, error) {
	m, err := ssh.Probe(ctx, s.machineHost(c, key), s.cfg.Attached.Timeout)
	if err != nil {
		var hk *ssh.HostKeyError
		var ue *ssh.UnreachableError
		switch {
		case errors.As(err, &hk):
			return api.VirtualMachine{}, &service.ProbeError{Field: "host_key", Err: err}
		case errors.As(err, &ue) && strings.Contains(err.Error(), "refused the key"):
			return api.VirtualMachine{}, &service.ProbeError{Field: "ssh_settings.ssh_private_key_file", Err: err}
		case errors.As(err, &ue):
			return api.VirtualMachine{}, &service.ProbeError{Field: "address", Err: err}
		}
		return api.VirtualMachine{}, &service.ProbeError{Field: "address", Err: err}
	}
	return api.VirtualMachine{HostKey: m.HostKey, VCPUs: m.VCPUs, MemoryGB: m.MemoryGB, GPUs: m.GPUs}, nil
}

// probeKubernetes is service.KubernetesProbe: it asks the cluster's API
// server with the kubernetes provider's own code.
func (s *Server) probeKubernetes(ctx context.Context, c *api.Compute, kubeconfig string) (string, error) {
	p, err := kubernetes.Attached(s.cfg.Attached.Kubernetes, []byte(kubeconfig), c.Kubernetes.Namespace, "", s.log)
	if err != nil {
		if strings.HasPrefix(err.Error(), "attached.kubernetes") {
			// The server's configuration, not the file.
			return "", &service.ProbeError{Field: "type", Err: fmt.Errorf("this server cannot attach Kubernetes clusters: %w", err)}
		}
		return "", &service.ProbeError{Field: "kubeconfig_file", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Attached.Timeout)
	defer cancel()
	host, err := p.Check(ctx, c.Kubernetes.Properties.InstanceTypes)
	var ce *kubernetes.CheckError
	switch {
	case errors.As(err, &ce):
		return "", &service.ProbeError{Field: ce.Field, Err: ce.Err}
	case err != nil:
		return "", &service.ProbeError{Field: "kubeconfig_file", Err: err}
	}
	return host, nil
}

// attachedProvider builds the provider of attached compute c: an ssh
// provider for a machine, a kubernetes provider for a cluster.
func (s *Server) attachedProvider(ctx context.Context, c *api.Compute) (provider.Provider, error) {
	var key string
	if err := s.store.View(ctx, func(tx store.Tx) (err error) {
		key, err = service.AttachedCredentials(ctx, tx, s.svc.SecretBox, c)
		return err
	}); err != nil {
		return nil, err
	}
	if c.Kubernetes != nil {
		return kubernetes.Attached(s.cfg.Attached.Kubernetes, []byte(key), c.Kubernetes.Namespace, c.Location,
			s.log.With("compute", c.Name, "workspace", c.Workspace))
	}
	return ssh.New(ssh.Config{Hosts: []ssh.Host{s.machineHost(c, key)}, Binary: s.cfg.Attached.Binary,
		Timeout: s.cfg.Attached.Timeout, Logger: s.log.With("compute", c.Name, "workspace", c.Workspace)})
}
