// Package local is the provider that runs nodes on this machine: a node is
// a `tide agent` child process with its own folder, <DataDir>/nodes/<id>/.
//
// Agents are started in their own session (setsid), so a server restart
// does not kill them, and the node folders are the provider's only state:
// a new Provider on the same data dir finds the surviving agents, checking
// each pid against the process's start time and command line so that a
// reused pid is never mistaken for an agent.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/provider"
)

// Name is the provider's registry name.
const Name = "local"

// Config configures the local provider.
type Config struct {
	// AgentCommand is the agent program and its leading arguments; the
	// agent flags (agent.Flags.Args) are appended. Default: this
	// executable followed by "agent".
	AgentCommand []string
	// DataDir holds the node folders, in DataDir/nodes/. Required.
	DataDir string
	// GracePeriod is how long Delete waits after SIGTERM before SIGKILL.
	// It should exceed the jobs' grace periods, which the agent honours
	// when it stops. Default 30s.
	GracePeriod time.Duration
	// Env is added to the agents' environment (the server's environment
	// is inherited).
	Env []string
	// GPUs are the host's GPU device indices that nodes get, disjoint
	// between nodes (see gpus.go). Factory detects them unless the
	// location lists them ("gpus": [0, 1, ...]; for hosts whose drivers the
	// server cannot see, and for tests).
	GPUs []string
	// Logger receives the provider's logs. Default: discard.
	Logger *slog.Logger
	// CapacityUnavailable simulates a capacity outage: Create fails with
	// an insufficient-capacity error during its window (see Outage).
	CapacityUnavailable Outage
	// Now is the provider's clock (the outage's window). Default time.Now.
	Now func() time.Time
}

// Provider is the local provider.
type Provider struct {
	cfg     Config
	log     *slog.Logger
	started time.Time // the outage's window counts from here

	mu sync.Mutex
	// exited holds, for the agents this instance started, a channel
	// closed once the child was reaped.
	exited map[string]chan struct{}
	// reserved holds the GPUs of nodes being created, until their
	// node.json records them.
	reserved map[string][]string
}

var _ provider.Provider = (*Provider)(nil)

// New returns a local provider.
func New(cfg Config) (*Provider, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("data_dir: required")
	}
	if len(cfg.AgentCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("agent_command: finding this executable: %w", err)
		}
		cfg.AgentCommand = []string{exe, "agent"}
	}
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CapacityUnavailable.For < 0 || cfg.CapacityUnavailable.After < 0 {
		return nil, fmt.Errorf("capacity_unavailable_for, capacity_unavailable_after: must not be negative (got %s, %s)", cfg.CapacityUnavailable.For, cfg.CapacityUnavailable.After)
	}
	if cfg.CapacityUnavailable.After > 0 && cfg.CapacityUnavailable.For == 0 {
		return nil, errors.New("capacity_unavailable_after: needs capacity_unavailable_for (how long the outage lasts)")
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "nodes"), 0o755); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	return &Provider{cfg: cfg, log: cfg.Logger.With(slog.String("provider", Name)), started: cfg.Now(), exited: map[string]chan struct{}{}, reserved: map[string][]string{}}, nil
}

// Factory builds a local provider from a location's settings:
// "agent_command" (a string or a list of strings), "grace_period" (a Go
// duration such as "30s"), "data_dir" (default: deps.DataDir) and "gpus"
// ("auto", the default: the host's NVIDIA GPUs; or a list of indices), and
// a simulated capacity outage: "capacity_unavailable_for" (a duration) from
// "capacity_unavailable_after" (a duration, default 0) after the start.
func Factory(name string, settings map[string]any, deps provider.Deps) (provider.Provider, error) {
	cfg := Config{DataDir: deps.DataDir, Logger: deps.Logger}
	detect := true
	for k, v := range settings {
		switch k {
		case "agent_command":
			switch x := v.(type) {
			case string:
				cfg.AgentCommand = strings.Fields(x)
			case []any:
				for _, e := range x {
					s, ok := e.(string)
					if !ok {
						return nil, fmt.Errorf("agent_command: must be a list of strings (got %v)", e)
					}
					cfg.AgentCommand = append(cfg.AgentCommand, s)
				}
			default:
				return nil, fmt.Errorf("agent_command: must be a string or a list of strings (got %T)", v)
			}
		case "grace_period":
			s, _ := v.(string)
			d, err := time.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("grace_period: must be a duration such as \"30s\" (got %v)", v)
			}
			cfg.GracePeriod = d
		case "data_dir":
			s, ok := v.(string)
			if !ok || s == "" {
				return nil, fmt.Errorf("data_dir: must be a folder path (got %v)", v)
			}
			cfg.DataDir = s
		case "gpus":
			ids, err := provider.ParseGPUs(v)
			if err != nil {
				return nil, err
			}
			cfg.GPUs, detect = ids, false
		case "capacity_unavailable_for", "capacity_unavailable_after":
			d, err := provider.SettingDuration(k, v)
			if err != nil {
				return nil, err
			}
			if k == "capacity_unavailable_for" {
				cfg.CapacityUnavailable.For = d
			} else {
				cfg.CapacityUnavailable.After = d
			}
		default:
			return nil, fmt.Errorf("%s: unknown setting of the local provider; known: agent_command, grace_period, data_dir, gpus, capacity_unavailable_for, capacity_unavailable_after", k)
		}
	}
	if detect {
		cfg.GPUs = provider.DetectGPUs()
	} else if err := provider.CheckListedGPUs(cfg.GPUs, provider.DetectGPUs(), "this host"); err != nil {
		return nil, err
	}
	return New(cfg)
}

// Name returns "local".
func (p *Provider) Name() string { return Name }

// HostCapacity is this machine's CPUs, memory and the GPUs nodes can get:
// every node of the local provider runs here.
func (p *Provider) HostCapacity() api.Size { return provider.ThisHost(len(p.cfg.GPUs)) }

var _ provider.Hosted = (*Provider)(nil)

// nodeFile is <nodeDir>/node.json.
type nodeFile struct {
	ID        string       `json:"id"`
	Workspace string       `json:"workspace"`
	Compute   string       `json:"compute"`
	Created   time.Time    `json:"created"`
	Pid       int          `json:"pid"`
	StartTime string       `json:"start_time"`
	Capacity  api.Capacity `json:"capacity"`
}

func (p *Provider) nodeDir(id string) string {
	return filepath.Join(p.cfg.DataDir, "nodes", id)
}

// Create makes the node's folder and starts its agent.
func (p *Provider) Create(ctx context.Context, req provider.NodeRequest) (*provider.Node, error) {
	if !provider.ValidNodeID(req.ID) {
		return nil, fmt.Errorf("node id %q: must be letters, digits, '-', '_' or '.'", req.ID)
	}
	if err := p.checkOutage(req); err != nil {
		return nil, err
	}
	dir := p.nodeDir(req.ID)
	devs, err := p.allocateGPUs(req.ID, req.Size.Name, req.Location, req.Size.GPUs)
	if err != nil {
		return nil, err
	}
	defer p.releaseReservation(req.ID)
	if req.Keep && p.resume(dir) {
		nf := nodeFile{ID: req.ID, Workspace: req.Workspace, Compute: req.Compute, Created: time.Now().UTC(), Capacity: capacity(req, devs)}
		n, err := p.start(req, dir, nf)
		if err != nil {
			return nil, fmt.Errorf("starting node %s again: %w", req.ID, err)
		}
		return n, nil
	}
	// Mkdir, not MkdirAll: it fails when the folder exists, which reserves
	// the id even against another provider instance.
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, &provider.AlreadyExistsError{ID: req.ID}
		}
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	nf := nodeFile{ID: req.ID, Workspace: req.Workspace, Compute: req.Compute, Created: time.Now().UTC(), Capacity: capacity(req, devs)}
	n, err := p.start(req, dir, nf)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	return n, nil
}

func capacity(req provider.NodeRequest, gpuDevices []string) api.Capacity {
	return api.Capacity{
		VCPUs: req.Size.VCPUs, MemoryGB: req.Size.MemoryGB, GPUs: req.Size.GPUs, GPUDevices: gpuDevices,
		// Nodes share this machine and nothing is reserved: the size's
		// figures are what the scheduler counts, not what the node has.
		Note: fmt.Sprintf("logical: host has %d cores", goruntime.NumCPU()),
	}
}

func (p *Provider) start(req provider.NodeRequest, dir string, nf nodeFile) (*provider.Node, error) {
	logFile, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// Every local node is on this host, so the others reach it on loopback.
	flags := agent.Flags{ServerURLs: strings.Split(req.ServerURL, ","), CAFingerprint: req.CAFingerprint, RunAs: req.RunAs, CacheGB: req.CacheGB, NodeID: req.ID, Dir: dir, Capacity: nf.Capacity, Address: "127.0.0.1", Runtime: req.Runtime, Network: req.Network}
	args := append(slices.Clone(p.cfg.AgentCommand[1:]), flags.Args()...)
	cmd := exec.Command(p.cfg.AgentCommand[0], args...)
	cmd.Dir = dir
	cmd.Env = append(withoutToken(os.Environ()), p.cfg.Env...)
	// The token goes through the environment: argv is readable by every
	// user of the machine, /proc/<pid>/environ only by the owner.
	cmd.Env = append(cmd.Env, agent.TokenEnv+"="+req.Token)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A new session: the agent survives the server's exit and terminal
	// signals, and Delete can stop everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// node.json first, without a pid: a server killed between the agent's
	// start and the pid's write leaves a node folder whose agent runs, and
	// whoever reads it next finds that agent by its folder (findAgent)
	// rather than taking the node for dead and running its jobs again
	// elsewhere while the agent still runs them.
	if err := writeJSONFile(filepath.Join(dir, "node.json"), nf); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("writing node.json: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting agent %s: %w", p.cfg.AgentCommand[0], err)
	}
	// Start returns after exec succeeded, so /proc shows the agent itself.
	nf.Pid = cmd.Process.Pid
	nf.StartTime = procStartTime(nf.Pid)
	done := make(chan struct{})
	p.mu.Lock()
	p.exited[req.ID] = done
	p.mu.Unlock()
	// Reap the child when it exits, so no zombie remains.
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.log.Info("agent exited", slog.String("node", req.ID), slog.Any("status", err))
		close(done)
		p.mu.Lock()
		if p.exited[req.ID] == done {
			delete(p.exited, req.ID)
		}
		p.mu.Unlock()
	}()
	if err := writeJSONFile(filepath.Join(dir, "node.json"), nf); err != nil {
		_ = syscall.Kill(-nf.Pid, syscall.SIGKILL)
		return nil, fmt.Errorf("writing node.json: %w", err)
	}
	p.log.Info("agent started", slog.String("node", req.ID), slog.Int("pid", nf.Pid))
	return p.view(dir, &nf), nil
}

// Get returns the node's state.
func (p *Provider) Get(ctx context.Context, id string) (*provider.Node, error) {
	if !provider.ValidNodeID(id) {
		return nil, &provider.NotFoundError{ID: id}
	}
	return p.read(id)
}

func (p *Provider) read(id string) (*provider.Node, error) {
	dir := p.nodeDir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) || isStopped(dir) {
		return nil, &provider.NotFoundError{ID: id}
	}
	nf, err := readNodeFile(dir)
	if err == nil && nf.Pid == 0 {
		// Written before its agent started; a server that stopped before
		// writing the pid leaves it so.
		nf.Pid, nf.StartTime = findAgent(dir)
	}
	if err != nil {
		// A server that stopped between the folder and node.json leaves
		// this: report it so the controller deletes it.
		return &provider.Node{ID: id, ProviderID: "none", State: provider.StateExited,
			Reason: fmt.Sprintf("unreadable node.json (%v); delete the node", err)}, nil
	}
	return p.view(dir, nf), nil
}

// view turns a node file into the provider's view, checking the agent.
func (p *Provider) view(dir string, nf *nodeFile) *provider.Node {
	n := &provider.Node{
		ID: nf.ID, ProviderID: "pid:" + strconv.Itoa(nf.Pid), State: provider.StateRunning,
		Compute: nf.Compute, Workspace: nf.Workspace, CreatedAt: nf.Created, Capacity: nf.Capacity,
	}
	if !isAgent(nf.Pid, nf.StartTime, dir) {
		n.State = provider.StateExited
		n.Reason = "the agent process exited; see " + filepath.Join(dir, "agent.log")
		if tail := lastLine(filepath.Join(dir, "agent.log")); tail != "" {
			n.Reason += ": " + tail
		}
	}
	return n
}

// List returns every node folder's node.
func (p *Provider) List(ctx context.Context) ([]*provider.Node, error) {
	entries, err := os.ReadDir(filepath.Join(p.cfg.DataDir, "nodes"))
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var out []*provider.Node
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if isStopped(p.nodeDir(e.Name())) {
			continue // a stopped node's kept disk, not a node
		}
		n, err := p.read(e.Name())
		if provider.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// Delete stops the agent (SIGTERM to its process group, SIGKILL to its
// whole session after GracePeriod) and removes the node's folder.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if !provider.ValidNodeID(id) {
		return &provider.NotFoundError{ID: id}
	}
	dir := p.nodeDir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return &provider.NotFoundError{ID: id}
	}
	p.stopAgent(ctx, id, dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting node %s: removing its folder: %w", id, err)
	}
	return nil
}

// Stop stops the node's agent as Delete does but keeps its folder (the
// disk of a stopped compute instance): List and Get no longer show the
// node, a Create with the same id and Keep starts it again on the folder,
// and Delete removes the folder.
func (p *Provider) Stop(ctx context.Context, id string) error {
	if !provider.ValidNodeID(id) {
		return &provider.NotFoundError{ID: id}
	}
	dir := p.nodeDir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return &provider.NotFoundError{ID: id}
	}
	// The marker first: a server restarting meanwhile must not take the
	// folder for an orphan and delete it.
	if err := os.WriteFile(filepath.Join(dir, stoppedMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("stopping node %s: %w", id, err)
	}
	p.stopAgent(ctx, id, dir)
	return nil
}

// stoppedMarker marks a node folder kept by Stop.
const stoppedMarker = "stopped"

func isStopped(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, stoppedMarker))
	return err == nil
}

// resume makes a folder kept by Stop a node's folder again; it reports
// whether there was one.
func (p *Provider) resume(dir string) bool {
	if !isStopped(dir) {
		return false
	}
	return os.Remove(filepath.Join(dir, stoppedMarker)) == nil
}

// stopAgent stops a node's agent: SIGTERM to its process group, SIGKILL
// to its whole session after GracePeriod.
func (p *Provider) stopAgent(ctx context.Context, id, dir string) {
	nf, err := readNodeFile(dir)
	if err != nil || nf.Pid == 0 {
		// No pid written: an agent may run all the same.
		nf, err = &nodeFile{}, nil
		nf.Pid, nf.StartTime = findAgent(dir)
	}
	if err == nil && isAgent(nf.Pid, nf.StartTime, dir) {
		p.log.InfoContext(ctx, "stopping agent", slog.String("node", id), slog.Int("pid", nf.Pid))
		_ = syscall.Kill(-nf.Pid, syscall.SIGTERM)
		if !p.waitExit(ctx, id, nf, p.cfg.GracePeriod) {
			p.log.WarnContext(ctx, "agent still running after the grace period; killing it", slog.String("node", id))
		}
	}
	if err == nil && nf.Pid > 0 {
		// Whatever is left of the session (the agent, jobs that outlived
		// it) goes now; jobs run in their own process groups but stay in
		// the agent's session.
		killSession(nf.Pid)
	}
}

// waitExit waits up to grace for the agent to exit; it reports whether it did.
func (p *Provider) waitExit(ctx context.Context, id string, nf *nodeFile, grace time.Duration) bool {
	p.mu.Lock()
	done := p.exited[id]
	p.mu.Unlock()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	dir := p.nodeDir(id)
	for {
		if !isAgent(nf.Pid, nf.StartTime, dir) {
			return true
		}
		select {
		case <-done: // our own child: reaped
			return true
		case <-tick.C: // another instance's child: poll /proc
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func readNodeFile(dir string) (*nodeFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return nil, err
	}
	var nf nodeFile
	if err := json.Unmarshal(b, &nf); err != nil {
		return nil, fmt.Errorf("decoding node.json: %w", err)
	}
	return &nf, nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func withoutToken(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, agent.TokenEnv+"=")
	})
}
