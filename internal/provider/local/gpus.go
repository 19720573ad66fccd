package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/internal/provider"
)

// The local provider's nodes share this host, so they share its GPUs
// unless each gets its own: Create gives a node of a size with GPUs that
// many of the host's devices that no other live node holds (recorded in its
// node.json), and its agent shows its jobs only those. A size needing more
// GPUs than are free waits (insufficient capacity, retried); one needing
// more than the host has fails with the reason.

// detectGPUs lists the host's NVIDIA GPUs by index: from nvidia-smi -L,
// else from /dev/nvidiaN.
func detectGPUs() []string {
	if bin, err := exec.LookPath("nvidia-smi"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, bin, "-L").Output(); err == nil {
			var ids []string
			for _, m := range regexp.MustCompile(`(?m)^GPU (\d+):`).FindAllStringSubmatch(string(out), -1) {
				ids = append(ids, m[1])
			}
			if len(ids) > 0 {
				return ids
			}
		}
	}
	devs, _ := filepath.Glob("/dev/nvidia[0-9]*")
	var ids []string
	for _, d := range devs {
		if idx := strings.TrimPrefix(filepath.Base(d), "nvidia"); isIndex(idx) {
			ids = append(ids, idx)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	return ids
}

func isIndex(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0
}

// parseGPUs reads the "gpus" setting: "auto" (detect) or a list of device
// indices, none twice.
func parseGPUs(v any) ([]string, bool, error) {
	if s, ok := v.(string); ok && s == "auto" {
		return nil, true, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false, fmt.Errorf("gpus: want auto or a list of device indices such as [0, 1, 2, 3] (got %v)", v)
	}
	var ids []string
	for _, e := range list {
		id := strings.TrimSpace(fmt.Sprint(e))
		if !isIndex(id) {
			return nil, false, fmt.Errorf("gpus: %v is not a device index (0, 1, ...)", e)
		}
		if slices.Contains(ids, id) {
			return nil, false, fmt.Errorf("gpus: device %s is listed twice", id)
		}
		ids = append(ids, id)
	}
	return ids, false, nil
}

// allocateGPUs reserves need of the host's free GPUs for node id.
func (p *Provider) allocateGPUs(id, size, location string, need int) ([]string, error) {
	if need <= 0 || len(p.cfg.GPUs) == 0 {
		return nil, nil
	}
	if need > len(p.cfg.GPUs) {
		return nil, fmt.Errorf("size %s needs %d GPUs but this location's host has %d (gpus: %s); choose a smaller size", size, need, len(p.cfg.GPUs), strings.Join(p.cfg.GPUs, ", "))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	used := map[string]string{}
	for node, devs := range p.reserved {
		for _, d := range devs {
			used[d] = node
		}
	}
	dirs, _ := os.ReadDir(filepath.Join(p.cfg.DataDir, "nodes"))
	for _, e := range dirs {
		dir := p.nodeDir(e.Name())
		if e.Name() == id || isStopped(dir) {
			continue
		}
		if nf, err := readNodeFile(dir); err == nil {
			for _, d := range nf.Capacity.GPUDevices {
				used[d] = nf.ID
			}
		}
	}
	var free []string
	for _, d := range p.cfg.GPUs {
		if _, ok := used[d]; !ok {
			free = append(free, d)
		}
	}
	if len(free) < need {
		return nil, &provider.InsufficientCapacityError{Size: size, Location: location,
			Reason: fmt.Sprintf("the size needs %d GPUs and %d of the host's %d are free; it waits for nodes holding GPUs to go", need, len(free), len(p.cfg.GPUs))}
	}
	devs := free[:need:need]
	p.reserved[id] = devs
	return devs, nil
}

// releaseReservation forgets a reservation once the node's node.json
// records its devices (or its creation failed).
func (p *Provider) releaseReservation(id string) {
	p.mu.Lock()
	delete(p.reserved, id)
	p.mu.Unlock()
}
