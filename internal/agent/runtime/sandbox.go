package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sandbox is the sandbox runtime, for hosts without Docker: the process
// runtime inside bubblewrap (bwrap). The job gets its own PID, IPC and UTS
// namespaces and a mount namespace in which the host's filesystem is
// read-only except the job folder and Spec.Mounts, with a private /tmp, a
// minimal /dev and its own /proc. CPU and memory are limited to the node's
// size with cgroups (v1 or v2) where the agent may create them; what
// cannot be enforced is written to the job's log.
type Sandbox struct {
	// Limits are the node's size.
	Limits Limits
	// IsolateNetwork gives the job its own network namespace with only a
	// loopback interface; by default the job shares the node's network.
	IsolateNetwork bool
	// Bwrap is the bubblewrap program. Default: "bwrap" on PATH.
	Bwrap string
	// CgroupRoot is where cgroup hierarchies are mounted. Default /sys/fs/cgroup.
	CgroupRoot string
	// OutputDelay is as in Process.
	OutputDelay time.Duration
}

// BindsReadOnly reports true: bubblewrap binds read-only without root.
func (s *Sandbox) BindsReadOnly() bool { return true }

// Start runs spec.Command in a new sandbox.
func (s *Sandbox) Start(ctx context.Context, spec Spec) (Handle, error) {
	bwrap := s.Bwrap
	if bwrap == "" {
		bwrap = "bwrap"
	}
	path, err := exec.LookPath(bwrap)
	if err != nil {
		return nil, fmt.Errorf("runtime sandbox: bubblewrap not found (%w); install the bubblewrap package", err)
	}
	args := []string{path,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--ro-bind", "/", "/",
		"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
	}
	if s.IsolateNetwork {
		args = append(args, "--unshare-net")
	}
	if s.Limits.GPUs > 0 {
		// --dev makes a minimal /dev: the GPUs must be bound in; with
		// devices assigned, only the node's (and the shared control
		// devices), so nodes on one host do not share GPUs.
		gpus := sandboxGPUDevices(s.Limits.GPUDevices)
		for _, g := range gpus {
			args = append(args, "--dev-bind", g, g)
		}
		if len(gpus) == 0 {
			spec.note("tide: sandbox: the node's size has %d GPUs but this host has no /dev/nvidia* devices", s.Limits.GPUs)
		}
	}
	for _, m := range append([]string{spec.Dir}, spec.Mounts...) {
		args = append(args, "--bind", m, m)
	}
	for _, b := range spec.ReadOnly {
		args = append(args, "--ro-bind", b.Source, b.Target)
	}
	args = append(args, "--chdir", spec.Dir, "--", "/bin/sh", "-c", spec.Command)
	if spec.ShmSize > 0 {
		spec.note("tide: sandbox: resources.shm_size is not applied (the job shares the host's /dev/shm)")
	}

	cg := s.newCgroup(spec)
	argv := args
	if len(cg.procs) > 0 {
		// A shell joins the cgroups, then becomes bwrap: every process of
		// the job is inside from its first instruction.
		argv = append([]string{"/bin/sh", "-c", `while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"`, "sh"}, cg.procs...)
		argv = append(append(argv, "--"), args...)
	}
	h, err := Process{OutputDelay: s.OutputDelay}.start(argv, spec, 0)
	if err != nil {
		cg.remove()
		return nil, err
	}
	return &sandboxHandle{handle: h, cg: cg, memory: s.Limits.MemoryBytes}, nil
}

type sandboxHandle struct {
	*handle
	cg     *cgroup
	memory int64
	reason string
}

func (h *sandboxHandle) Wait() (int, error) {
	code, err := h.handle.Wait()
	if h.cg.oomKills() > 0 {
		h.reason = fmt.Sprintf("out of memory (limit %s): a process of the job was killed for exceeding the node's memory", formatBytes(h.memory))
		if code == 0 {
			code = 137
		}
	}
	h.cg.remove()
	return code, err
}

// ExitReason says when a process was killed for the memory limit.
func (h *sandboxHandle) ExitReason() string { return h.reason }

// cgroup is the job's cgroups: one folder per v1 controller, or one v2 folder.
type cgroup struct {
	dirs   []string
	procs  []string // cgroup.procs files to join
	events string   // the file that counts OOM kills
}

// newCgroup creates the job's cgroups and sets the limits it can; it
// notes in the job's log what it could not enforce.
func (s *Sandbox) newCgroup(spec Spec) *cgroup {
	cg := &cgroup{}
	l := s.Limits
	if l.MemoryBytes <= 0 && l.VCPUs <= 0 {
		return cg
	}
	root := s.CgroupRoot
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	name := containerName(spec.Name)
	if name == "" {
		name = "tide-job-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	var problems []string
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		problems = cg.setupV2(filepath.Join(root, "tide", name), l)
	} else {
		problems = cg.setupV1(root, name, l)
	}
	for _, p := range problems {
		spec.note("tide: sandbox: %s", p)
	}
	return cg
}

// setupV1 makes memory and cpu cgroups under <root>/<controller>/tide/<name>.
func (cg *cgroup) setupV1(root, name string, l Limits) []string {
	var problems []string
	if l.MemoryBytes > 0 {
		dir := filepath.Join(root, "memory", "tide", name)
		err := cg.make(dir, [][2]string{
			{"memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)},
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("memory limit %s not enforced: %v", formatBytes(l.MemoryBytes), err))
		} else {
			// Without swap accounting the limit still holds for RAM.
			_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(l.MemoryBytes, 10)), 0)
			cg.events = filepath.Join(dir, "memory.oom_control")
		}
	}
	if l.VCPUs > 0 {
		err := cg.make(filepath.Join(root, "cpu", "tide", name), [][2]string{
			{"cpu.cfs_period_us", "100000"},
			{"cpu.cfs_quota_us", strconv.Itoa(l.VCPUs * 100000)},
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("CPU limit of %d vCPUs not enforced: %v", l.VCPUs, err))
		}
	}
	return problems
}

// setupV2 makes one cgroup v2 folder with memory.max and cpu.max.
func (cg *cgroup) setupV2(dir string, l Limits) []string {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return []string{fmt.Sprintf("memory and CPU limits not enforced: %v", err)}
	}
	// The controllers must be enabled for the children of tide/ (and of
	// its parent, which is usually the root and has them).
	_ = os.WriteFile(filepath.Join(filepath.Dir(parent), "cgroup.subtree_control"), []byte("+memory +cpu"), 0)
	_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +cpu"), 0)
	var files [][2]string
	if l.MemoryBytes > 0 {
		files = append(files, [2]string{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)}, [2]string{"memory.swap.max", "0"})
	}
	if l.VCPUs > 0 {
		files = append(files, [2]string{"cpu.max", strconv.Itoa(l.VCPUs*100000) + " 100000"})
	}
	if err := cg.make(dir, files); err != nil {
		return []string{fmt.Sprintf("memory and CPU limits not enforced: %v", err)}
	}
	cg.events = filepath.Join(dir, "memory.events")
	return nil
}

// make creates dir, writes the files and checks that cgroup.procs can be
// written; on failure it removes dir again.
func (cg *cgroup) make(dir string, files [][2]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0); err != nil {
			// memory.swap.max is missing without swap accounting; the
			// memory limit holds anyway.
			if f[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist) {
				continue
			}
			_ = os.Remove(dir)
			return fmt.Errorf("writing %s: %w", f[0], err)
		}
	}
	procs := filepath.Join(dir, "cgroup.procs")
	f, err := os.OpenFile(procs, os.O_WRONLY, 0)
	if err != nil {
		_ = os.Remove(dir)
		return err
	}
	f.Close()
	cg.dirs = append(cg.dirs, dir)
	cg.procs = append(cg.procs, procs)
	return nil
}

// oomKills counts the processes the kernel killed for the memory limit.
func (cg *cgroup) oomKills() int {
	if cg.events == "" {
		return 0
	}
	f, err := os.Open(cg.events)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// remove deletes the cgroups; the kernel refuses while a process is still
// inside, which Wait's group kill makes short.
func (cg *cgroup) remove() {
	for _, d := range cg.dirs {
		deadline := time.Now().Add(2 * time.Second)
		for os.Remove(d) != nil && time.Now().Before(deadline) {
			<-time.After(20 * time.Millisecond)
		}
	}
}

// sandboxGPUDevices returns the /dev/nvidia* files a sandbox binds: every
// one when devices is empty, else /dev/nvidiaN for the given indices plus
// the devices that are not a GPU (nvidiactl, nvidia-uvm, nvidia-modeset).
func sandboxGPUDevices(devices []string) []string {
	all, _ := filepath.Glob("/dev/nvidia*")
	if len(devices) == 0 {
		return all
	}
	var out []string
	for _, g := range all {
		idx, isGPU := strings.CutPrefix(filepath.Base(g), "nvidia")
		if _, err := strconv.Atoi(idx); err != nil || !isGPU {
			out = append(out, g) // nvidiactl, nvidia-uvm, ...
			continue
		}
		if slices.Contains(devices, idx) {
			out = append(out, g)
		}
	}
	return out
}

// HostNetwork: the sandbox shares the node's network unless it isolates it.
func (s *Sandbox) HostNetwork() bool { return !s.IsolateNetwork }
