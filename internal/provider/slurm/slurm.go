// Package slurm is the provider that gets nodes from a Slurm cluster: a
// node is a batch job (sbatch) whose script runs `tide agent`, with the
// CPUs, memory and GPUs of the compute's size; Delete is scancel.
//
// The provider's own record is a folder per node, <work_dir>/<id>/, with
// node.json (the request and the Slurm job id) and the agent's log; it must
// sit on a file system the Slurm nodes share, as the agent works there.
// Slurm is the truth about the job: squeue's state and reason become the
// node's (a pending job is a starting node with Slurm's pending reason, a
// preempted job a preempted node, a node failure an exited one), so a new
// provider (after a server restart) finds its nodes again from the folders
// and squeue.
package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/provider"
)

// Name is the provider's registry name.
const Name = "slurm"

// jobPrefix starts the name of every Slurm job tide submits.
const jobPrefix = "tide-"

// Provider is the slurm provider.
type Provider struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// cache is squeue's last answer: the controller checks each node in a
	// burst, and one squeue serves them all.
	cache struct {
		at           time.Time
		byID, byName map[string]job
	}
}

// cacheFor is how long an squeue answer serves Get and List.
const cacheFor = time.Second

var _ provider.Provider = (*Provider)(nil)

// New returns a slurm provider.
func New(cfg Config) (*Provider, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("work_dir: %w", err)
	}
	return &Provider{cfg: cfg, log: cfg.Logger.With(slog.String("provider", Name))}, nil
}

// Factory builds a slurm provider from a location's settings (see
// Config; keys are slurm_conf, partition, low_priority_partition, account,
// time_limit, extra_args, agent_command, work_dir, env, stop_timeout).
// work_dir defaults to deps.DataDir/nodes.
func Factory(name string, settings map[string]any, deps provider.Deps) (provider.Provider, error) {
	cfg, err := parseSettings(settings)
	if err != nil {
		return nil, err
	}
	if cfg.WorkDir == "" && deps.DataDir != "" {
		cfg.WorkDir = filepath.Join(deps.DataDir, "nodes")
	}
	cfg.Logger = deps.Logger
	return New(cfg)
}

// Name returns "slurm".
func (p *Provider) Name() string { return Name }

// nodeFile is <work_dir>/<id>/node.json.
type nodeFile struct {
	ID        string       `json:"id"`
	Workspace string       `json:"workspace"`
	Compute   string       `json:"compute"`
	Created   time.Time    `json:"created"`
	Capacity  api.Capacity `json:"capacity"`
	// JobID is the Slurm job id; empty between the folder's creation and
	// sbatch's answer (then the job is found by name).
	JobID string `json:"job_id"`
}

// command runs a Slurm command with the configured slurm.conf.
func (p *Provider) command(ctx context.Context, env []string, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, agent.TokenEnv+"=")
	})
	if p.cfg.SlurmConf != "" {
		cmd.Env = append(cmd.Env, "SLURM_CONF="+p.cfg.SlurmConf)
	}
	cmd.Env = append(cmd.Env, env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return stdout.Bytes(), fmt.Errorf("%s: %s", name, msg)
	}
	return stdout.Bytes(), nil
}

// Create makes the node's folder and submits its batch job.
func (p *Provider) Create(ctx context.Context, req provider.NodeRequest) (*provider.Node, error) {
	if !validID(req.ID) {
		return nil, fmt.Errorf("node id %q: must be letters, digits, '-', '_' or '.'", req.ID)
	}
	dir := filepath.Join(p.cfg.WorkDir, req.ID)
	// Mkdir, not MkdirAll: it fails when the folder exists, which reserves
	// the id even against another provider instance.
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, &provider.AlreadyExistsError{ID: req.ID}
		}
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	nf := nodeFile{
		ID: req.ID, Workspace: req.Workspace, Compute: req.Compute, Created: time.Now().UTC(),
		Capacity: api.Capacity{VCPUs: req.Size.VCPUs, MemoryGB: req.Size.MemoryGB, GPUs: req.Size.GPUs,
			Note: "a Slurm allocation of the size's CPUs, memory and GPUs"},
	}
	// The record comes first: a server that stops during sbatch leaves a
	// folder whose job List still finds by name, never an unknown job.
	if err := writeJSONFile(filepath.Join(dir, "node.json"), nf); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	env := append(slices.Clone(p.cfg.Env), agent.TokenEnv+"="+req.Token)
	// The token reaches the job through sbatch's environment (exported to
	// the job), never the script or a command line.
	out, err := p.command(ctx, env, p.script(req, dir, nf.Capacity), "sbatch", p.sbatchArgs(req, dir)...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	p.forgetJobs()
	nf.JobID, _, _ = strings.Cut(strings.TrimSpace(string(out)), ";")
	if err := writeJSONFile(filepath.Join(dir, "node.json"), nf); err != nil {
		_, _ = p.command(context.WithoutCancel(ctx), nil, nil, "scancel", nf.JobID)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	p.log.InfoContext(ctx, "submitted agent job", slog.String("node", req.ID), slog.String("job", nf.JobID))
	n := p.view(&nf, nil)
	n.State, n.Reason = provider.StateStarting, ""
	return n, nil
}

func (p *Provider) sbatchArgs(req provider.NodeRequest, dir string) []string {
	args := []string{
		"--parsable",
		"--job-name=" + jobPrefix + req.ID,
		"--comment=tide node " + req.ID + " of " + req.Workspace + "/" + req.Compute,
		// A preempted or failed node is replaced by tide, not requeued by
		// Slurm: the job's end is what tells tide.
		"--no-requeue",
		"--nodes=1", "--ntasks=1",
		"--cpus-per-task=" + strconv.Itoa(max(req.Size.VCPUs, 1)),
		"--output=" + filepath.Join(dir, "agent.log"),
		"--chdir=" + dir,
	}
	if mb := int(req.Size.MemoryGB * 1024); mb > 0 {
		args = append(args, "--mem="+strconv.Itoa(mb)+"M")
	}
	if req.Size.GPUs > 0 {
		args = append(args, "--gres=gpu:"+strconv.Itoa(req.Size.GPUs))
	}
	part := p.cfg.Partition
	if req.Tier == api.TierLowPriority {
		part = p.cfg.LowPriorityPartition
	}
	if part != "" {
		args = append(args, "--partition="+part)
	}
	if p.cfg.Account != "" {
		args = append(args, "--account="+p.cfg.Account)
	}
	if p.cfg.TimeLimit != "" {
		args = append(args, "--time="+p.cfg.TimeLimit)
	}
	return append(args, p.cfg.ExtraArgs...)
}

// script is the batch script: exec the agent, so Slurm's signals reach it.
func (p *Provider) script(req provider.NodeRequest, dir string, capacity api.Capacity) []byte {
	flags := agent.Flags{ServerURLs: strings.Split(req.ServerURL, ","), CAFingerprint: req.CAFingerprint, RunAs: req.RunAs, CacheGB: req.CacheGB, NodeID: req.ID, Dir: dir, Capacity: capacity}
	var b strings.Builder
	b.WriteString("#!/bin/sh\nexec")
	for _, a := range append(slices.Clone(p.cfg.AgentCommand), flags.Args()...) {
		b.WriteString(" " + quote(a))
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// job is one line of squeue.
type job struct {
	ID, Name, State, Reason, Nodes string
}

// jobs returns this user's tide jobs, by job id and by name, including
// the ones that ended recently (squeue keeps them for MinJobAge). An answer
// less than cacheFor old is reused.
func (p *Provider) jobs(ctx context.Context) (byID, byName map[string]job, err error) {
	p.mu.Lock()
	if time.Since(p.cache.at) < cacheFor {
		byID, byName = p.cache.byID, p.cache.byName
	}
	p.mu.Unlock()
	if byID != nil {
		return byID, byName, nil
	}
	byID, byName, err = p.squeue(ctx)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	p.cache.at, p.cache.byID, p.cache.byName = time.Now(), byID, byName
	p.mu.Unlock()
	return byID, byName, nil
}

// forgetJobs drops the cached squeue answer (after sbatch or scancel).
func (p *Provider) forgetJobs() {
	p.mu.Lock()
	p.cache.at = time.Time{}
	p.mu.Unlock()
}

func (p *Provider) squeue(ctx context.Context) (byID, byName map[string]job, err error) {
	out, err := p.command(ctx, nil, nil, "squeue", "--me", "--noheader", "--states=all", "--format=%i|%T|%r|%N|%j")
	if err != nil {
		return nil, nil, fmt.Errorf("listing Slurm jobs: %w", err)
	}
	byID, byName = map[string]job{}, map[string]job{}
	for line := range strings.Lines(string(out)) {
		f := strings.SplitN(strings.TrimSpace(line), "|", 5)
		if len(f) != 5 || !strings.HasPrefix(f[4], jobPrefix) {
			continue
		}
		j := job{ID: f[0], State: f[1], Reason: f[2], Nodes: f[3], Name: f[4]}
		byID[j.ID] = j
		// A resubmitted id keeps the newest job (highest id) per name.
		if old, ok := byName[j.Name]; !ok || jobNum(j.ID) > jobNum(old.ID) {
			byName[j.Name] = j
		}
	}
	return byID, byName, nil
}

func jobNum(id string) int {
	n, _ := strconv.Atoi(id)
	return n
}

// find returns node's Slurm job, if squeue still lists it.
func find(nf *nodeFile, byID, byName map[string]job) (job, bool) {
	if nf.JobID != "" {
		j, ok := byID[nf.JobID]
		return j, ok
	}
	j, ok := byName[jobPrefix+nf.ID]
	return j, ok
}

// view maps the node's Slurm job (nil: squeue no longer lists it) to the
// provider's node states.
func (p *Provider) view(nf *nodeFile, j *job) *provider.Node {
	n := &provider.Node{
		ID: nf.ID, ProviderID: "slurm:" + nf.JobID, State: provider.StateRunning,
		Compute: nf.Compute, Workspace: nf.Workspace, CreatedAt: nf.Created, Capacity: nf.Capacity,
	}
	if j == nil {
		if nf.JobID == "" {
			n.ProviderID = "slurm:unsubmitted"
		}
		n.State = provider.StateExited
		n.Reason = fmt.Sprintf("Slurm job %s is no longer listed by squeue (it ended); see %s", nf.JobID, filepath.Join(p.cfg.WorkDir, nf.ID, "agent.log"))
		return n
	}
	n.ProviderID = "slurm:" + j.ID
	why := ""
	if j.Reason != "" && j.Reason != "None" {
		why = ": " + j.Reason
	}
	switch j.State {
	case "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD":
		n.State, n.Reason = provider.StateStarting, fmt.Sprintf("Slurm job %s is %s%s", j.ID, strings.ToLower(j.State), why)
	case "RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING":
	case "PREEMPTED", "SUSPENDED", "STOPPED":
		n.State, n.Reason = provider.StatePreempted, fmt.Sprintf("Slurm %s job %s on %s%s", strings.ToLower(j.State), j.ID, j.Nodes, why)
	case "NODE_FAIL", "BOOT_FAIL":
		n.State, n.Reason = provider.StateExited, fmt.Sprintf("Slurm node failure (%s) on %s ended job %s%s", j.State, j.Nodes, j.ID, why)
	default: // COMPLETED, CANCELLED, FAILED, TIMEOUT, OUT_OF_MEMORY, DEADLINE...
		n.State, n.Reason = provider.StateExited, fmt.Sprintf("Slurm job %s ended %s%s; see %s", j.ID, j.State, why, filepath.Join(p.cfg.WorkDir, nf.ID, "agent.log"))
	}
	return n
}

// Get returns the node's state.
func (p *Provider) Get(ctx context.Context, id string) (*provider.Node, error) {
	if !validID(id) {
		return nil, &provider.NotFoundError{ID: id}
	}
	nf, err := p.read(id)
	if err != nil {
		return nil, err
	}
	byID, byName, err := p.jobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	j, ok := find(nf, byID, byName)
	if !ok {
		return p.view(nf, nil), nil
	}
	return p.view(nf, &j), nil
}

// read returns the node's record; a folder without a readable node.json
// (a crash mid-Create) reads as a node without a job id.
func (p *Provider) read(id string) (*nodeFile, error) {
	dir := filepath.Join(p.cfg.WorkDir, id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, &provider.NotFoundError{ID: id}
	}
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	var nf nodeFile
	if err == nil {
		err = json.Unmarshal(b, &nf)
	}
	if err != nil || nf.ID != id {
		return &nodeFile{ID: id}, nil
	}
	return &nf, nil
}

// List returns every node folder's node.
func (p *Provider) List(ctx context.Context) ([]*provider.Node, error) {
	entries, err := os.ReadDir(p.cfg.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	byID, byName, err := p.jobs(ctx)
	if err != nil {
		return nil, err
	}
	var out []*provider.Node
	for _, e := range entries {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		nf, err := p.read(e.Name())
		if provider.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		if j, ok := find(nf, byID, byName); ok {
			out = append(out, p.view(nf, &j))
		} else {
			out = append(out, p.view(nf, nil))
		}
	}
	return out, nil
}

// Delete cancels the node's job (Slurm sends SIGTERM, then SIGKILL after
// its KillWait), waits for it to end, and removes the node's folder.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if !validID(id) {
		return &provider.NotFoundError{ID: id}
	}
	nf, err := p.read(id)
	if err != nil {
		return err
	}
	byID, byName, err := p.jobs(ctx)
	if err != nil {
		return fmt.Errorf("deleting node %s: %w", id, err)
	}
	if j, ok := find(nf, byID, byName); ok && active(j.State) {
		_, err := p.command(ctx, nil, nil, "scancel", j.ID)
		p.forgetJobs()
		if err != nil {
			return fmt.Errorf("deleting node %s: %w", id, err)
		}
		p.log.InfoContext(ctx, "canceled agent job", slog.String("node", id), slog.String("job", j.ID))
		if err := p.waitEnd(ctx, j.ID); err != nil {
			p.log.WarnContext(ctx, "Slurm job still active; removing its folder anyway", slog.String("node", id), slog.String("job", j.ID), slog.Any("err", err))
		}
	}
	if err := os.RemoveAll(filepath.Join(p.cfg.WorkDir, id)); err != nil {
		return fmt.Errorf("deleting node %s: removing its folder: %w", id, err)
	}
	return nil
}

// waitEnd polls squeue until job id is no longer active.
func (p *Provider) waitEnd(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StopTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		byID, _, err := p.squeue(ctx)
		if err == nil {
			if j, ok := byID[id]; !ok || !active(j.State) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// active reports whether a job in state holds or may get an allocation.
func active(state string) bool {
	switch state {
	case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
		"STAGE_OUT", "RESIZING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD":
		return true
	}
	return false
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

// quote quotes s for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// validID reports whether id can be a folder name and a job name.
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
