// Package docker is the provider whose nodes are Docker containers: each
// node is a container running `tide agent`, with the tide binary bind-mounted
// in (the image needs only the binary's shared libraries), the node's size
// as the container's CPU and memory limits, and its folder bound at the
// same path as on the host.
//
// The containers are the provider's state: each carries labels with its
// node id, compute, workspace, creation time and capacity, and the
// provider's data folder, so a new Provider (after a server restart) lists
// the nodes an earlier one created, and two servers on different data
// folders do not see each other's nodes.
//
// Networking: a node joins the Docker network its compute names
// (network_settings.vnet_name; an unknown network fails the node's
// creation), or the provider's default network ("host" unless configured).
// No port is ever published. The agent reaches the server at the request's
// URL, so the server must listen on an address the network can reach.
package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/dockerengine"
	"github.com/tideml/tide/internal/provider"
)

// Name is the provider's registry name.
const Name = "docker"

// agentPath is where the tide binary is mounted in a node container.
const agentPath = "/usr/local/bin/tide"

// Labels on node containers.
const (
	labelProvider  = "tide.provider"
	labelDataDir   = "tide.provider-data-dir"
	labelNode      = "tide.node"
	labelWorkspace = "tide.workspace"
	labelCompute   = "tide.compute"
	labelCreated   = "tide.created"
	labelCapacity  = "tide.capacity"
	// labelGPUs lists the host GPUs a node container was given.
	labelGPUs = "tide.gpu-devices"
)

// Config configures the docker provider.
type Config struct {
	// Engine is the Docker engine. Default: the engine at $DOCKER_HOST or
	// /var/run/docker.sock.
	Engine *dockerengine.Client
	// Image is the node image: any Linux image with /bin/sh and the tide
	// binary's shared libraries (glibc), e.g. debian:bookworm-slim. Required.
	Image string
	// AgentBinary is the tide binary on the host, mounted into each node.
	// Default: this executable.
	AgentBinary string
	// AgentArgs come before the agent flags. Default: ["agent"].
	AgentArgs []string
	// DataDir holds the node folders, in DataDir/nodes/. Required.
	DataDir string
	// Network is the nodes' network when the compute names none. Default "host".
	Network string
	// GracePeriod is how long Delete waits after SIGTERM before SIGKILL.
	// Default 30s.
	GracePeriod time.Duration
	// Logger receives the provider's logs. Default: discard.
	Logger *slog.Logger
	// GPUs are the host's GPU indices the node containers get, disjoint
	// between containers (provider.PickGPUs). Factory detects them unless
	// the location lists them ("gpus").
	GPUs []string
}

// Provider is the docker provider.
type Provider struct {
	cfg Config
	log *slog.Logger
	// instance tells this data folder's containers from others'.
	instance string
	// gpuMu makes choosing a container's GPUs and creating it one step.
	gpuMu sync.Mutex
}

var _ provider.Provider = (*Provider)(nil)

// New returns a docker provider.
func New(cfg Config) (*Provider, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("data_dir: required")
	}
	if cfg.Image == "" {
		return nil, errors.New("image: required (an image with /bin/sh and glibc, e.g. debian:bookworm-slim)")
	}
	if cfg.Engine == nil {
		cfg.Engine = dockerengine.New("")
	}
	if cfg.AgentBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("agent_binary: finding this executable: %w", err)
		}
		cfg.AgentBinary = exe
	}
	if cfg.AgentArgs == nil {
		cfg.AgentArgs = []string{"agent"}
	}
	if cfg.Network == "" {
		cfg.Network = "host"
	}
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	cfg.DataDir = abs
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "nodes"), 0o755); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	sum := sha256.Sum256([]byte(cfg.DataDir))
	return &Provider{cfg: cfg, log: cfg.Logger.With(slog.String("provider", Name)), instance: hex.EncodeToString(sum[:])[:10]}, nil
}

// Factory builds a docker provider from a location's settings: "image"
// (required), "agent_binary", "network", "grace_period" (a Go duration)
// and "data_dir" (default: deps.DataDir/docker).
func Factory(name string, settings map[string]any, deps provider.Deps) (provider.Provider, error) {
	cfg := Config{DataDir: filepath.Join(deps.DataDir, Name), Logger: deps.Logger}
	detect := true
	for k, v := range settings {
		if k == "gpus" {
			ids, err := provider.ParseGPUs(v)
			if err != nil {
				return nil, err
			}
			cfg.GPUs, detect = ids, false
			continue
		}
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("%s: must be a non-empty string (got %v)", k, v)
		}
		switch k {
		case "image":
			cfg.Image = s
		case "agent_binary":
			cfg.AgentBinary = s
		case "network":
			cfg.Network = s
		case "data_dir":
			cfg.DataDir = s
		case "grace_period":
			d, err := time.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("grace_period: must be a duration such as \"30s\" (got %q)", s)
			}
			cfg.GracePeriod = d
		default:
			return nil, fmt.Errorf("%s: unknown setting of the docker provider; known: image, agent_binary, network, grace_period, data_dir, gpus", k)
		}
	}
	if detect {
		cfg.GPUs = provider.DetectGPUs()
	} else if err := provider.CheckListedGPUs(cfg.GPUs, provider.DetectGPUs(), "this host"); err != nil {
		return nil, err
	}
	return New(cfg)
}

// Name returns "docker".
func (p *Provider) Name() string { return Name }

// containerName is the node's container: node ids are unique per server,
// the instance suffix keeps servers on different data folders apart.
func (p *Provider) containerName(id string) string {
	return "tide-node-" + id + "-" + p.instance
}

func (p *Provider) nodeDir(id string) string {
	return filepath.Join(p.cfg.DataDir, "nodes", id)
}

// Create makes the node's folder and starts its container.
func (p *Provider) Create(ctx context.Context, req provider.NodeRequest) (*provider.Node, error) {
	if !provider.ValidNodeID(req.ID) {
		return nil, fmt.Errorf("node id %q: must be letters, digits, '-', '_' or '.'", req.ID)
	}
	network := req.Network
	if network == "" {
		network = p.cfg.Network
	} else if ok, err := p.cfg.Engine.NetworkExists(ctx, network); err != nil {
		return nil, fmt.Errorf("creating node %s: checking network %s: %w", req.ID, network, err)
	} else if !ok {
		return nil, fmt.Errorf("network_settings.vnet_name %q: no Docker network of that name; create it with 'docker network create %s' or remove vnet_name", network, network)
	}
	if ok, err := p.cfg.Engine.ImageExists(ctx, p.cfg.Image); err != nil {
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	} else if !ok {
		if err := p.cfg.Engine.PullImage(ctx, p.cfg.Image); err != nil {
			return nil, fmt.Errorf("image %s: not present locally and could not be pulled: %w", p.cfg.Image, err)
		}
	}
	dir := p.nodeDir(req.ID)
	// Mkdir, not MkdirAll: it fails when the folder exists, which reserves
	// the id even against another provider instance.
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, &provider.AlreadyExistsError{ID: req.ID}
		}
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	n, err := p.start(ctx, req, dir, network)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	return n, nil
}

func (p *Provider) start(ctx context.Context, req provider.NodeRequest, dir, network string) (*provider.Node, error) {
	capacity := api.Capacity{VCPUs: req.Size.VCPUs, MemoryGB: req.Size.MemoryGB, GPUs: req.Size.GPUs}
	cpus := req.Size.VCPUs
	if host := goruntime.NumCPU(); cpus > host {
		capacity.Note = fmt.Sprintf("container limited to the host's %d cores", host)
		cpus = host
	}
	capJSON, _ := json.Marshal(capacity)
	flags := agent.Flags{ServerURLs: strings.Split(req.ServerURL, ","), CAFingerprint: req.CAFingerprint, RunAs: req.RunAs, CacheGB: req.CacheGB, NodeID: req.ID, Dir: dir, Capacity: capacity, Runtime: req.Runtime}
	created := time.Now().UTC()
	cfg := dockerengine.ContainerConfig{
		Image:      p.cfg.Image,
		Entrypoint: append(append([]string{agentPath}, p.cfg.AgentArgs...), flags.Args()...),
		Cmd:        []string{},
		// The token goes through the environment, never argv; only the
		// engine's users (root-equivalent) can read it.
		Env:        []string{agent.TokenEnv + "=" + req.Token},
		WorkingDir: dir,
		Hostname:   req.ID,
		Labels: map[string]string{
			labelProvider: Name, labelDataDir: p.cfg.DataDir, labelNode: req.ID,
			labelWorkspace: req.Workspace, labelCompute: req.Compute,
			labelCreated: created.Format(time.RFC3339Nano), labelCapacity: string(capJSON),
		},
		HostConfig: dockerengine.HostConfig{
			Binds:       []string{p.cfg.AgentBinary + ":" + agentPath + ":ro", dir + ":" + dir},
			NetworkMode: network,
			NanoCPUs:    int64(cpus) * 1e9,
			Init:        true,
		},
	}
	if network == "host" {
		cfg.Hostname = "" // the engine refuses a hostname on the host network
	}
	if m := int64(req.Size.MemoryGB * (1 << 30)); m > 0 {
		cfg.HostConfig.Memory, cfg.HostConfig.MemorySwap = m, m
	}
	if req.Size.GPUs > 0 {
		// Choosing the GPUs and creating the container are one step, so
		// two nodes created at once never get the same devices.
		p.gpuMu.Lock()
		defer p.gpuMu.Unlock()
		devs, err := p.pickGPUs(ctx, req)
		if err != nil {
			return nil, err
		}
		if len(devs) > 0 {
			cfg.Labels[labelGPUs] = strings.Join(devs, ",")
		}
		if _, err := os.Stat("/dev/nvidiactl"); err == nil {
			// The node's own devices by ID (a count would let the driver
			// give every container the first GPUs). Inside, the
			// container sees them numbered from 0.
			req := dockerengine.DeviceRequest{Driver: "nvidia", Count: req.Size.GPUs, Capabilities: [][]string{{"gpu"}}}
			if len(devs) > 0 {
				req.Count, req.DeviceIDs = 0, devs
			}
			cfg.HostConfig.DeviceRequests = []dockerengine.DeviceRequest{req}
		}
	}
	if uid := os.Getuid(); uid != 0 {
		cfg.User = strconv.Itoa(uid) + ":" + strconv.Itoa(os.Getgid())
	}
	id, err := p.cfg.Engine.CreateContainer(ctx, p.containerName(req.ID), cfg)
	if err != nil {
		var e *dockerengine.Error
		if errors.As(err, &e) && e.Status == http.StatusConflict {
			return nil, &provider.AlreadyExistsError{ID: req.ID}
		}
		return nil, fmt.Errorf("creating container from image %s: %w", p.cfg.Image, err)
	}
	if err := p.cfg.Engine.StartContainer(ctx, id); err != nil {
		_ = p.cfg.Engine.RemoveContainer(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("starting container: %w", err)
	}
	p.log.InfoContext(ctx, "node container started", slog.String("node", req.ID), slog.String("container", id[:12]), slog.String("network", network))
	return p.Get(ctx, req.ID)
}

// Get returns the node's state, from its container.
func (p *Provider) Get(ctx context.Context, id string) (*provider.Node, error) {
	if !provider.ValidNodeID(id) {
		return nil, &provider.NotFoundError{ID: id}
	}
	c, err := p.cfg.Engine.InspectContainer(ctx, p.containerName(id))
	if dockerengine.IsNotFound(err) {
		if _, serr := os.Stat(p.nodeDir(id)); serr == nil {
			// A folder without a container: a Create cut short, or a
			// container removed by hand. Delete cleans it up.
			return &provider.Node{ID: id, ProviderID: "none", State: provider.StateExited,
				Reason: "the node's container is gone; delete the node"}, nil
		}
		return nil, &provider.NotFoundError{ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("inspecting node %s: %w", id, err)
	}
	n := p.view(c.ID, c.Config.Labels)
	switch {
	case c.State.Running:
	case c.State.Status == "created":
		n.State = provider.StateStarting
	default:
		n.State = provider.StateExited
		n.Reason = fmt.Sprintf("the agent's container exited with code %d", c.State.ExitCode)
		if c.State.OOMKilled {
			n.Reason += " (out of memory)"
		}
		if c.State.Error != "" {
			n.Reason += ": " + c.State.Error
		} else if last, _ := p.cfg.Engine.LastLogLine(ctx, c.ID); last != "" {
			n.Reason += ": " + last
		}
	}
	return n, nil
}

// view is the provider's view of a container from its labels.
func (p *Provider) view(containerID string, labels map[string]string) *provider.Node {
	n := &provider.Node{
		ID: labels[labelNode], ProviderID: "container:" + containerID[:min(12, len(containerID))], State: provider.StateRunning,
		Workspace: labels[labelWorkspace], Compute: labels[labelCompute],
	}
	n.CreatedAt, _ = time.Parse(time.RFC3339Nano, labels[labelCreated])
	_ = json.Unmarshal([]byte(labels[labelCapacity]), &n.Capacity)
	return n
}

// List returns the nodes of this data folder, from their containers.
func (p *Provider) List(ctx context.Context) ([]*provider.Node, error) {
	cs, err := p.cfg.Engine.ListContainers(ctx, map[string]string{labelProvider: Name, labelDataDir: p.cfg.DataDir})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var out []*provider.Node
	for _, c := range cs {
		n := p.view(c.ID, c.Labels)
		switch c.State {
		case "running":
		case "created":
			n.State = provider.StateStarting
		default:
			n.State, n.Reason = provider.StateExited, "the agent's container "+c.Status
		}
		out = append(out, n)
	}
	return out, nil
}

// Delete stops the node's container (SIGTERM, SIGKILL after GracePeriod),
// removes it and the node's folder.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if !provider.ValidNodeID(id) {
		return &provider.NotFoundError{ID: id}
	}
	name := p.containerName(id)
	_, statErr := os.Stat(p.nodeDir(id))
	err := p.cfg.Engine.StopContainer(ctx, name, p.cfg.GracePeriod)
	if dockerengine.IsNotFound(err) && errors.Is(statErr, fs.ErrNotExist) {
		return &provider.NotFoundError{ID: id}
	}
	if err != nil && !dockerengine.IsNotFound(err) {
		p.log.WarnContext(ctx, "stopping node container", slog.String("node", id), slog.Any("error", err))
	}
	if err := p.cfg.Engine.RemoveContainer(ctx, name); err != nil && !dockerengine.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: removing its container: %w", id, err)
	}
	if err := os.RemoveAll(p.nodeDir(id)); err != nil {
		return fmt.Errorf("deleting node %s: removing its folder: %w", id, err)
	}
	return nil
}

// pickGPUs chooses the GPUs of a new node container: the host's that no
// other node container of this provider holds.
func (p *Provider) pickGPUs(ctx context.Context, req provider.NodeRequest) ([]string, error) {
	if len(p.cfg.GPUs) == 0 {
		return nil, nil
	}
	cs, err := p.cfg.Engine.ListContainers(ctx, map[string]string{labelProvider: Name, labelDataDir: p.cfg.DataDir})
	if err != nil {
		return nil, fmt.Errorf("listing node containers for their GPUs: %w", err)
	}
	used := map[string]bool{}
	for _, c := range cs {
		for _, d := range strings.Split(c.Labels[labelGPUs], ",") {
			if d != "" {
				used[d] = true
			}
		}
	}
	return provider.PickGPUs(p.cfg.GPUs, used, req.Size.GPUs, req.Size.Name, req.Location)
}
