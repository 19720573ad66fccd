package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/internal/dockerengine"
)

// Limits are a node's resources, which a job on it may use (one job runs
// on a node at a time, so it gets the whole node).
type Limits struct {
	// VCPUs caps CPU time; 0: no limit.
	VCPUs int
	// MemoryBytes caps memory (swap included); 0: no limit.
	MemoryBytes int64
	// GPUs is how many GPUs the node's size has.
	GPUs int
	// GPUDevices are the host GPUs the node may use (indices); empty: the
	// provider assigns none, and the runtime asks for GPUs by count.
	GPUDevices []string
}

// Docker is the docker runtime: each job runs in a container of its
// environment image, with the job folder (and Spec.Mounts) bound at the
// same path, as the agent's user, limited to the node's size. The container
// is removed once the job ended.
type Docker struct {
	// Engine is the Docker engine. Required.
	Engine *dockerengine.Client
	// Limits are the node's size.
	Limits Limits
	// Network is the containers' network ("" the engine's default bridge,
	// "none", "host" or a network name).
	Network string
	// Labels are added to every container (for example the node id), so
	// leftovers can be found.
	Labels map[string]string
	// HostHasGPUs says whether GPUs can be passed through. Default: the
	// host has /dev/nvidiactl.
	HostHasGPUs func() bool
	// OutputDelay bounds how long Wait waits for the output after the
	// container stopped. Default 2s.
	OutputDelay time.Duration
}

// Isolated reports true: a container gets only the job's variables.
func (d *Docker) Isolated() bool { return true }

// BindsReadOnly reports true: the engine binds read-only (":ro").
func (d *Docker) BindsReadOnly() bool { return true }

// buildTagPrefix names the images built from environments' build contexts.
const buildTagPrefix = "tide-build:"

// Prepare makes sure the job's image exists locally: a build context is
// built once per content (the image is tagged with the content's hash); an
// image missing locally is pulled. The engine's message is the error.
func (d *Docker) Prepare(ctx context.Context, spec *Spec) error {
	if spec.Image == "" && spec.BuildDir != "" {
		tag, err := contextTag(spec.BuildDir)
		if err != nil {
			return fmt.Errorf("environment.build.path %s: %w", spec.BuildDir, err)
		}
		ok, err := d.Engine.ImageExists(ctx, tag)
		if err != nil {
			return fmt.Errorf("inspecting image %s: %w", tag, err)
		}
		if ok {
			spec.note("tide: using image %s, built earlier from %s (same content)", tag, spec.BuildDir)
		} else {
			spec.note("tide: building image %s from %s", tag, spec.BuildDir)
			if err := d.Engine.BuildImage(ctx, spec.BuildDir, tag, spec.Note); err != nil {
				return fmt.Errorf("building environment.build.path %s: %w", spec.BuildDir, err)
			}
		}
		spec.Image = tag
	}
	if spec.Image == "" {
		return errors.New("environment.image: the docker runtime needs an image (or environment.build)")
	}
	ok, err := d.Engine.ImageExists(ctx, spec.Image)
	if err != nil {
		return fmt.Errorf("inspecting image %s: %w", spec.Image, err)
	}
	if ok {
		return nil
	}
	spec.note("tide: image %s is not on this node; pulling it", spec.Image)
	if err := d.Engine.PullImage(ctx, spec.Image); err != nil {
		return fmt.Errorf("image %s: not present locally and could not be pulled: %w", spec.Image, err)
	}
	return nil
}

// contextTag is the image tag for a build context: the hash of its tar stream.
func contextTag(dir string) (string, error) {
	h := sha256.New()
	if err := dockerengine.TarDir(dir, h); err != nil {
		return "", err
	}
	return buildTagPrefix + hex.EncodeToString(h.Sum(nil))[:20], nil
}

// Start creates and starts the job's container; spec.Image must exist
// (Prepare).
func (d *Docker) Start(ctx context.Context, spec Spec) (Handle, error) {
	if spec.Image == "" {
		if err := d.Prepare(ctx, &spec); err != nil {
			return nil, err
		}
	}
	cfg := dockerengine.ContainerConfig{
		Image:      spec.Image,
		Entrypoint: []string{"/bin/sh", "-c", spec.Command},
		Cmd:        []string{},
		Env:        spec.Env,
		WorkingDir: spec.Dir,
		Labels:     map[string]string{"tide.job-dir": spec.Dir},
		HostConfig: dockerengine.HostConfig{
			Binds:       []string{spec.Dir + ":" + spec.Dir},
			NetworkMode: d.Network,
			ShmSize:     spec.ShmSize,
			// docker-init as PID 1 reaps the job's orphans and forwards
			// the stop signal.
			Init: true,
		},
	}
	if uid := os.Getuid(); uid != 0 {
		// Files the job writes stay the agent's, so it can upload and
		// delete them.
		cfg.User = strconv.Itoa(uid) + ":" + strconv.Itoa(os.Getgid())
	}
	for k, v := range d.Labels {
		cfg.Labels[k] = v
	}
	for _, m := range spec.Mounts {
		cfg.HostConfig.Binds = append(cfg.HostConfig.Binds, m+":"+m)
	}
	for _, b := range spec.ReadOnly {
		cfg.HostConfig.Binds = append(cfg.HostConfig.Binds, b.Source+":"+b.Target+":ro")
	}
	if l := d.Limits; l.MemoryBytes > 0 {
		cfg.HostConfig.Memory, cfg.HostConfig.MemorySwap = l.MemoryBytes, l.MemoryBytes
	}
	if n := d.Limits.VCPUs; n > 0 {
		if host := goruntime.NumCPU(); n > host {
			spec.note("tide: the node's size has %d vCPUs but the host has %d; the container is limited to %d", n, host, host)
			n = host
		}
		cfg.HostConfig.NanoCPUs = int64(n) * 1e9
	}
	if g := d.Limits.GPUs; g > 0 {
		has := d.HostHasGPUs
		if has == nil {
			has = hostHasNvidia
		}
		if reqs := gpuRequests(d.Limits, has()); reqs != nil {
			cfg.HostConfig.DeviceRequests = reqs
		} else {
			spec.note("tide: the node's size has %d GPUs but this host has none (no /dev/nvidiactl); the container gets no GPU", g)
		}
	}
	id, err := d.Engine.CreateContainer(ctx, containerName(spec.Name), cfg)
	if err != nil {
		return nil, fmt.Errorf("creating container from image %s: %w", spec.Image, err)
	}
	h := &dockerHandle{d: d, id: id, memory: d.Limits.MemoryBytes, done: make(chan struct{}), logsDone: make(chan struct{}), oom: make(chan struct{}), out: newOutput()}
	// The engine's OOMKilled flag misses a kill whose event reached it
	// after the container's exit, so the handle also watches the events.
	watchCtx, cancelWatch := context.WithCancel(context.WithoutCancel(ctx))
	h.cancelWatch = cancelWatch
	if err := d.Engine.WatchContainer(watchCtx, id, []string{"oom"}, func(string) { h.oomOnce.Do(func() { close(h.oom) }) }); err != nil {
		spec.note("tide: cannot watch the container's events (%v); an out-of-memory kill may be reported as a plain kill", err)
	}
	// The logs are read from the container's start (the engine keeps
	// them), so none is missed; the stream ends when the container stopped.
	logCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancelLogs = cancel
	if err := d.Engine.StartContainer(ctx, id); err != nil {
		cancel()
		cancelWatch()
		_ = d.Engine.RemoveContainer(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("starting container from image %s: %w", spec.Image, err)
	}
	go func() {
		defer close(h.logsDone)
		_ = d.Engine.Logs(logCtx, id, h.out.to(spec.Stdout), h.out.to(spec.Stderr))
	}()
	if c, err := d.Engine.InspectContainer(ctx, id); err == nil {
		h.pid = c.State.Pid
	}
	return h, nil
}

// containerName makes name a valid, unique-enough container name, or ""
// (the engine picks one).
func containerName(name string) string {
	if name == "" {
		return ""
	}
	b := []byte("tide-")
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			b = append(b, byte(r))
		} else {
			b = append(b, '-')
		}
	}
	return string(b)
}

func hostHasNvidia() bool {
	_, err := os.Stat("/dev/nvidiactl")
	return err == nil
}

type dockerHandle struct {
	d          *Docker
	id         string
	pid        int
	memory     int64
	cancelLogs context.CancelFunc
	logsDone   chan struct{}
	out        *output // the logs' progress
	done       chan struct{}
	stopOnce   sync.Once
	stopped    atomic.Bool // Stop was asked: a kill is tide's, not the kernel's
	reason     string

	cancelWatch context.CancelFunc
	oom         chan struct{} // closed at the engine's first "oom" event
	oomOnce     sync.Once
}

// oomEventWait is how long a job killed by SIGKILL waits for an "oom" event
// that the engine may send after the container's exit.
const oomEventWait = 2 * time.Second

// sawOOM reports whether the engine said the container ran out of memory,
// waiting up to wait for the event.
func (h *dockerHandle) sawOOM(wait time.Duration) bool {
	select {
	case <-h.oom:
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-h.oom:
		return true
	case <-t.C:
		return false
	}
}

// Pid is the container's first process, as the host sees it.
func (h *dockerHandle) Pid() int { return h.pid }

func (h *dockerHandle) Wait() (int, error) {
	defer close(h.done)
	ctx := context.Background()
	code, err := h.d.Engine.WaitContainer(ctx, h.id)
	delay := h.d.OutputDelay
	if delay == 0 {
		delay = 2 * time.Second
	}
	// The engine ends the logs once it sent them all; a writer slow to
	// take them makes it wait, so only output that stopped coming is
	// given up on.
	if !h.out.wait(h.logsDone, delay) {
		h.cancelLogs()
		<-h.logsDone
	}
	h.cancelLogs()
	defer h.cancelWatch()
	c, ierr := h.d.Engine.InspectContainer(ctx, h.id)
	oom := ierr == nil && c.State.OOMKilled || h.sawOOM(0)
	if !oom && code == 137 && !h.stopped.Load() {
		// Killed, not by tide: the kernel's OOM kill may reach the engine
		// after the exit did.
		oom = h.sawOOM(oomEventWait)
	}
	if oom {
		h.reason = fmt.Sprintf("out of memory (limit %s): a process of the job was killed for exceeding the node's memory", formatBytes(h.memory))
		if code == 0 {
			// The killed process was not the job's main one, which then
			// exited 0: the job still lost work, so it fails like a kill.
			code = 137
		}
	}
	if rerr := h.d.Engine.RemoveContainer(ctx, h.id); rerr != nil && !dockerengine.IsNotFound(rerr) && err == nil {
		err = fmt.Errorf("removing container %s: %w", h.id[:12], rerr)
	}
	if err != nil {
		return code, fmt.Errorf("waiting for container %s: %w", h.id[:12], err)
	}
	return code, nil
}

// ExitReason says when the container was killed for its memory.
func (h *dockerHandle) ExitReason() string { return h.reason }

// Stop asks the engine to stop the container: its stop signal (SIGTERM)
// now, SIGKILL after grace.
func (h *dockerHandle) Stop(grace time.Duration) {
	h.stopOnce.Do(func() {
		h.stopped.Store(true)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
			defer cancel()
			// The engine counts whole seconds; never round a short grace
			// down to an immediate kill.
			g := max(grace.Round(time.Second), time.Second)
			_ = h.d.Engine.StopContainer(ctx, h.id, g)
		}()
	})
}

// formatBytes writes n in the largest binary unit that keeps it readable.
func formatBytes(n int64) string {
	switch {
	case n <= 0:
		return "none"
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%d MiB", n>>20)
	}
}

// gpuRequests asks Docker for the node's GPUs: its own devices by ID when
// the provider assigned some (nodes sharing the host must not share GPUs),
// else as many as the size has; nil when the host has none.
func gpuRequests(l Limits, hostHasGPUs bool) []dockerengine.DeviceRequest {
	switch {
	case l.GPUs <= 0 || !hostHasGPUs:
		return nil
	case len(l.GPUDevices) > 0:
		return []dockerengine.DeviceRequest{{Driver: "nvidia", DeviceIDs: l.GPUDevices, Capabilities: [][]string{{"gpu"}}}}
	}
	return []dockerengine.DeviceRequest{{Driver: "nvidia", Count: l.GPUs, Capabilities: [][]string{{"gpu"}}}}
}

// HostNetwork: only a container on the host's network shares it.
func (d *Docker) HostNetwork() bool { return d.Network == "host" }
