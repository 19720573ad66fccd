// Package ssh is the provider that runs nodes on machines reached over SSH:
// a node is a `tide agent` process started detached on one of the
// location's hosts, in its own folder <dir>/nodes/<id>/ on that host.
//
// It uses golang.org/x/crypto/ssh rather than the system ssh client: host
// key checks (pinned key or known_hosts) and timeouts are in tide's hands
// and cannot be loosened by a user's ~/.ssh/config, errors come back as
// values instead of parsed stderr, and the server needs no ssh binary.
//
// The hosts hold the provider's only state: each node folder has
// node.json (what the controller asked for) and agent.pid, so a new
// provider (after a server restart) lists the surviving agents by asking
// the hosts. A pid counts as the agent only while the process's command
// line names the node's folder, so a reused pid is never mistaken for it.
package ssh

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/provider"
)

// Name is the provider's registry name.
const Name = "ssh"

// Provider is the ssh provider.
type Provider struct {
	cfg     Config
	log     *slog.Logger
	hosts   []*remote
	binHash string

	// placeMu serialises placements, so each sees the ones before it.
	placeMu sync.Mutex

	mu sync.Mutex
	// placing holds the ids placed on a host that no survey of the hosts
	// has seen yet: they count against the host's capacity (and hold
	// their GPUs) until their folder shows up (or Create fails, or Delete
	// runs).
	placing map[string]placement
	// where remembers the host of each node seen, so Get asks one host.
	where map[string]int
	// uploads serialises binary copies per host.
	uploads []sync.Mutex
}

var _ provider.Provider = (*Provider)(nil)

// New returns an ssh provider. It checks the settings and reads the key
// files and the binary, but does not contact the hosts.
func New(cfg Config) (*Provider, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, log: cfg.Logger.With(slog.String("provider", Name)),
		placing: map[string]placement{}, where: map[string]int{}, uploads: make([]sync.Mutex, len(cfg.Hosts))}
	for i, h := range cfg.Hosts {
		r, err := newRemote(h, cfg.KnownHosts)
		if err != nil {
			return nil, fmt.Errorf("hosts[%d].%w", i, err)
		}
		p.hosts = append(p.hosts, r)
	}
	f, err := os.Open(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	p.binHash = hex.EncodeToString(sum.Sum(nil))
	return p, nil
}

// Factory builds an ssh provider from a location's settings: "hosts" (a
// list of maps with address, port, user, key_file, host_key, capacity,
// dir), "known_hosts", "binary", "env" (a map), "grace_period", "timeout".
func Factory(name string, settings map[string]any, deps provider.Deps) (provider.Provider, error) {
	cfg, err := parseSettings(settings)
	if err != nil {
		return nil, err
	}
	cfg.Logger = deps.Logger
	return New(cfg)
}

// Name returns "ssh".
func (p *Provider) Name() string { return Name }

// nodeFile is <node folder>/node.json on the host.
type nodeFile struct {
	ID        string       `json:"id"`
	Workspace string       `json:"workspace"`
	Compute   string       `json:"compute"`
	Created   time.Time    `json:"created"`
	Capacity  api.Capacity `json:"capacity"`
}

// prelude makes $R the host's absolute tide folder.
func prelude(h *remote) string {
	return "R=" + quote(h.Dir) + `; mkdir -p "$R/nodes" "$R/bin" && cd "$R" && R=$(pwd) || exit 1` + "\n"
}

// listPrelude is prelude for a listing: it creates nothing, so a probe
// that runs while the machine is detached leaves no folder behind.
func listPrelude(h *remote) string {
	return "R=" + quote(h.Dir) + `; [ -d "$R/nodes" ] || exit 0; cd "$R" && R=$(pwd) || exit 1` + "\n"
}

// listScript prints, for each node folder, three lines: "node <id>",
// node.json on one line, and "alive <pid>" or "dead <last log line>".
const listScript = `cd "$R/nodes" || exit 1
for d in */; do
  [ -d "$d" ] || continue
  id=${d%/}
  [ -n "$ONLY" ] && [ "$id" != "$ONLY" ] && continue
  echo "node $id"
  tr -d '\n' < "$id/node.json" 2>/dev/null; echo
  pid=$(cat "$id/agent.pid" 2>/dev/null)
  if [ -n "$pid" ] && tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$R/nodes/$id"; then
    echo "alive $pid"
  else
    echo "dead $(tail -n 1 "$id/agent.log" 2>/dev/null)"
  fi
done
`

// hostNodes lists the nodes on host i (only the one named only, if set).
func (p *Provider) hostNodes(ctx context.Context, i int, only string) ([]*provider.Node, error) {
	h := p.hosts[i]
	out, err := h.run(ctx, p.cfg.Timeout, listPrelude(h)+"ONLY="+quote(only)+"\n"+listScript, nil)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var nodes []*provider.Node
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "node ")
		if !ok || !sc.Scan() {
			continue
		}
		nfLine := sc.Bytes()
		n := &provider.Node{ID: id, ProviderID: "ssh://" + h.name() + "/" + id, State: provider.StateRunning}
		var nf nodeFile
		if err := json.Unmarshal(nfLine, &nf); err != nil {
			n.State, n.Reason = provider.StateExited, fmt.Sprintf("unreadable node.json on %s (%v); delete the node", h.name(), err)
		} else {
			n.Workspace, n.Compute, n.CreatedAt, n.Capacity = nf.Workspace, nf.Compute, nf.Created, nf.Capacity
		}
		if !sc.Scan() {
			break
		}
		if st := sc.Text(); strings.HasPrefix(st, "alive ") {
			n.ProviderID = "ssh://" + h.name() + "/pid/" + strings.TrimPrefix(st, "alive ")
		} else if n.State == provider.StateRunning {
			n.State = provider.StateExited
			n.Reason = fmt.Sprintf("the agent process exited; see %s:%s/nodes/%s/agent.log", h.name(), h.Dir, id)
			if tail := strings.TrimSpace(strings.TrimPrefix(st, "dead")); tail != "" {
				n.Reason += ": " + tail
			}
		}
		nodes = append(nodes, n)
	}
	p.mu.Lock()
	for _, n := range nodes {
		p.where[n.ID] = i
	}
	p.mu.Unlock()
	return nodes, nil
}

// survey lists every host in parallel; errs[i] is host i's error.
func (p *Provider) survey(ctx context.Context, only string) (nodes [][]*provider.Node, errs []error) {
	nodes, errs = make([][]*provider.Node, len(p.hosts)), make([]error, len(p.hosts))
	var wg sync.WaitGroup
	for i := range p.hosts {
		wg.Go(func() { nodes[i], errs[i] = p.hostNodes(ctx, i, only) })
	}
	wg.Wait()
	return nodes, errs
}

// List returns the nodes of every host. If a host cannot be reached it
// fails: reporting that host's nodes as gone would make the controller
// forget nodes that may still run.
func (p *Provider) List(ctx context.Context) ([]*provider.Node, error) {
	nodes, errs := p.survey(ctx, "")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []*provider.Node
	for _, ns := range nodes {
		out = append(out, ns...)
	}
	return out, nil
}

// Get returns the node's state. While the node's host is unreachable it
// fails with an *UnreachableError (the heartbeat timeout then makes the
// node unusable).
func (p *Provider) Get(ctx context.Context, id string) (*provider.Node, error) {
	if !validID(id) {
		return nil, &provider.NotFoundError{ID: id}
	}
	p.mu.Lock()
	i, known := p.where[id]
	p.mu.Unlock()
	if known {
		ns, err := p.hostNodes(ctx, i, id)
		if err != nil {
			return nil, err
		}
		if len(ns) == 1 {
			return ns[0], nil
		}
	}
	nodes, errs := p.survey(ctx, id)
	for _, ns := range nodes {
		if len(ns) == 1 {
			return ns[0], nil
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	p.forget(id)
	return nil, &provider.NotFoundError{ID: id}
}

func (p *Provider) forget(id string) {
	p.mu.Lock()
	delete(p.where, id)
	delete(p.placing, id)
	p.mu.Unlock()
}

// Create picks a host with a free slot, copies the binary there if it is
// missing or stale, and starts the agent detached.
func (p *Provider) Create(ctx context.Context, req provider.NodeRequest) (*provider.Node, error) {
	if !validID(req.ID) {
		return nil, fmt.Errorf("node id %q: must be letters, digits, '-', '_' or '.'", req.ID)
	}
	at, err := p.place(ctx, req)
	if err != nil {
		return nil, err
	}
	n, err := p.start(ctx, req, at)
	if err != nil && !provider.IsAlreadyExists(err) {
		p.mu.Lock()
		delete(p.placing, req.ID)
		p.mu.Unlock()
	}
	return n, err
}

// start makes the node's folder on the placement's host and starts its
// agent there.
func (p *Provider) start(ctx context.Context, req provider.NodeRequest, at placement) (*provider.Node, error) {
	i, h := at.host, p.hosts[at.host]
	nf := nodeFile{
		ID: req.ID, Workspace: req.Workspace, Compute: req.Compute, Created: time.Now().UTC(),
		Capacity: api.Capacity{VCPUs: req.Size.VCPUs, MemoryGB: req.Size.MemoryGB, GPUs: req.Size.GPUs, GPUDevices: at.gpus,
			Note: "logical: the size's figures on host " + h.Address},
	}
	nfJSON, err := json.Marshal(nf)
	if err != nil {
		return nil, err
	}
	script := prelude(h) + p.startScript(req, nf.Capacity)
	var out []byte
	for attempt := 0; ; attempt++ {
		// The token reaches the agent through stdin and the environment,
		// never a command line: argv is readable by every user of the host.
		stdin := strings.NewReader(req.Token + "\n" + string(nfJSON) + "\n")
		out, err = h.run(ctx, p.cfg.Timeout, script, stdin)
		if err != nil {
			return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
		}
		if strings.TrimSpace(string(out)) != "stale" || attempt > 0 {
			break
		}
		if err := p.ensureBinary(ctx, i); err != nil {
			return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
		}
	}
	if strings.TrimSpace(string(out)) == "stale" {
		return nil, fmt.Errorf("creating node %s: host %s: the tide binary's sha256 still differs after copying it", req.ID, h.name())
	}
	if strings.TrimSpace(string(out)) == "exists" {
		return nil, &provider.AlreadyExistsError{ID: req.ID}
	}
	p.mu.Lock()
	p.where[req.ID] = i
	p.mu.Unlock()
	p.log.InfoContext(ctx, "agent started", slog.String("node", req.ID), slog.String("host", h.name()), slog.String("out", strings.TrimSpace(string(out))))
	return &provider.Node{
		ID: req.ID, ProviderID: "ssh://" + h.name() + "/pid/" + strings.TrimPrefix(strings.TrimSpace(string(out)), "started "),
		State: provider.StateRunning, Compute: req.Compute, Workspace: req.Workspace, CreatedAt: nf.Created, Capacity: nf.Capacity,
	}, nil
}

// startScript makes the node folder (failing with "exists" when it is
// there), writes node.json from stdin and starts the agent in a new
// session, so it outlives the ssh connection.
func (p *Provider) startScript(req provider.NodeRequest, capacity api.Capacity) string {
	flags := agent.Flags{ServerURLs: strings.Split(req.ServerURL, ","), CAFingerprint: req.CAFingerprint, RunAs: req.RunAs, CacheGB: req.CacheGB, NodeID: req.ID, Dir: "@DIR@", Capacity: capacity}
	var cmd strings.Builder
	cmd.WriteString(`"$R/bin/tide" agent`)
	for _, a := range flags.Args() {
		if a == "@DIR@" {
			cmd.WriteString(` "$N"`)
			continue
		}
		cmd.WriteString(" " + quote(a))
	}
	var env strings.Builder
	for _, kv := range p.cfg.Env {
		k, v, _ := strings.Cut(kv, "=")
		env.WriteString("export " + k + "=" + quote(v) + "\n")
	}
	// A missing or stale binary stops the script before it reads stdin;
	// Create copies the binary and runs it again.
	return `[ "$(sha256sum bin/tide 2>/dev/null | cut -d' ' -f1)" = ` + quote(p.binHash) + ` ] || { echo stale; exit 0; }
N="$R/nodes/"` + quote(req.ID) + `
mkdir "$N" 2>/dev/null || { echo exists; exit 0; }
IFS= read -r TIDE_AGENT_TOKEN
export TIDE_AGENT_TOKEN
cat > "$N/node.json"
cd "$N"
` + env.String() + `setsid ` + cmd.String() + ` > agent.log 2>&1 < /dev/null &
echo $! > agent.pid
echo "started $!"
`
}

// placement is where place put a node: a host (by index) and the host's
// GPUs it holds.
type placement struct {
	host int
	gpus []string
}

// place reserves a slot (and the size's GPUs) for req on a host. Hosts
// that cannot be reached are skipped; if no host has room the error says
// why for each.
func (p *Provider) place(ctx context.Context, req provider.NodeRequest) (placement, error) {
	p.placeMu.Lock()
	defer p.placeMu.Unlock()
	nodes, errs := p.survey(ctx, "")
	gpus := p.hostsGPUs(ctx, req.Size.GPUs, errs)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.placing[req.ID]; ok {
		return placement{}, &provider.AlreadyExistsError{ID: req.ID}
	}
	used := make([]int, len(p.hosts))
	held := make([]map[string]bool, len(p.hosts))
	for i := range held {
		held[i] = map[string]bool{}
	}
	for i, ns := range nodes {
		for _, n := range ns {
			if n.ID == req.ID {
				return placement{}, &provider.AlreadyExistsError{ID: req.ID}
			}
			delete(p.placing, n.ID) // counted here from now on
			for _, d := range n.Capacity.GPUDevices {
				held[i][d] = true
			}
		}
		used[i] += len(ns)
	}
	for _, at := range p.placing {
		used[at.host]++
		for _, d := range at.gpus {
			held[at.host][d] = true
		}
	}
	var reasons []string
	waiting := false // some host could take the node once nodes go
	for i, h := range p.hosts {
		if errs[i] != nil {
			reasons = append(reasons, errs[i].Error())
			continue
		}
		if used[i] >= h.Capacity {
			reasons = append(reasons, fmt.Sprintf("host %s: full (%d of capacity %d)", h.name(), used[i], h.Capacity))
			waiting = true
			continue
		}
		devs, err := provider.PickGPUs(gpus[i], held[i], req.Size.GPUs, req.Size.Name, req.Location)
		if err != nil {
			reasons = append(reasons, "host "+h.name()+": "+gpuReason(err))
			waiting = waiting || provider.IsInsufficientCapacity(err)
			continue
		}
		at := placement{host: i, gpus: devs}
		p.placing[req.ID] = at
		return at, nil
	}
	if errors.Join(errs...) == nil && waiting {
		return placement{}, &provider.InsufficientCapacityError{Size: req.Size.Name, Location: req.Location, Reason: strings.Join(reasons, "; ")}
	}
	return placement{}, fmt.Errorf("creating node %s: no host has room: %s", req.ID, strings.Join(reasons, "; "))
}

// ensureBinary copies the tide binary to host i unless it is there with
// the same sha256.
func (p *Provider) ensureBinary(ctx context.Context, i int) error {
	p.uploads[i].Lock()
	defer p.uploads[i].Unlock()
	h := p.hosts[i]
	out, err := h.run(ctx, p.cfg.Timeout, prelude(h)+`sha256sum bin/tide 2>/dev/null | cut -d' ' -f1`, nil)
	if err != nil {
		return fmt.Errorf("checking the tide binary: %w", err)
	}
	if strings.TrimSpace(string(out)) == p.binHash {
		return nil
	}
	f, err := os.Open(p.cfg.Binary)
	if err != nil {
		return fmt.Errorf("binary: %w", err)
	}
	defer f.Close()
	start := time.Now()
	_, err = h.run(ctx, 10*p.cfg.Timeout, prelude(h)+`t="bin/.tide.$$"; cat > "$t" && chmod 755 "$t" && mv -f "$t" bin/tide`, f)
	if err != nil {
		return fmt.Errorf("copying the tide binary: %w", err)
	}
	p.log.InfoContext(ctx, "copied the tide binary", slog.String("host", h.name()), slog.Duration("took", time.Since(start)))
	return nil
}

// deleteScript stops the agent (SIGTERM to its process group, then
// SIGKILL to its whole session after $GRACE tenths of a second) and
// removes the node folder.
const deleteScript = `[ -d "$N" ] || { echo notfound; exit 0; }
pid=$(cat "$N/agent.pid" 2>/dev/null)
isagent() { [ -n "$pid" ] && tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$N"; }
if isagent; then
  kill -TERM "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  i=0
  while isagent && [ $i -lt $GRACE ]; do sleep 0.1; i=$((i+1)); done
fi
if [ -n "$pid" ]; then
  for f in /proc/[0-9]*/stat; do
    line=$(cat "$f" 2>/dev/null) || continue
    set -- ${line##*) }
    if [ "$4" = "$pid" ]; then p=${f%/stat}; kill -KILL "${p#/proc/}" 2>/dev/null; fi
  done
fi
rm -rf "$N" && echo deleted
`

// Delete stops the node's agent and removes its folder.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if !validID(id) {
		return &provider.NotFoundError{ID: id}
	}
	p.mu.Lock()
	i, known := p.where[id]
	p.mu.Unlock()
	if known {
		err := p.stop(ctx, i, id)
		if !provider.IsNotFound(err) {
			return err
		}
	}
	// Not where we last saw it (or never seen): find it.
	if _, err := p.Get(ctx, id); err != nil {
		return err
	}
	p.mu.Lock()
	i = p.where[id]
	p.mu.Unlock()
	return p.stop(ctx, i, id)
}

// stop stops node id's agent on host i and removes its folder.
func (p *Provider) stop(ctx context.Context, i int, id string) error {
	h := p.hosts[i]
	grace := int(p.cfg.GracePeriod / (100 * time.Millisecond))
	script := prelude(h) + fmt.Sprintf("N=\"$R/nodes/\"%s\nGRACE=%d\n", quote(id), grace) + deleteScript
	out, err := h.run(ctx, p.cfg.GracePeriod+p.cfg.Timeout, script, nil)
	if err != nil {
		return fmt.Errorf("deleting node %s: %w", id, err)
	}
	p.forget(id)
	if strings.TrimSpace(string(out)) == "notfound" {
		return &provider.NotFoundError{ID: id}
	}
	p.log.InfoContext(ctx, "agent stopped", slog.String("node", id), slog.String("host", h.name()))
	return nil
}

// validID reports whether id can be a folder name.
func validID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 200 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
