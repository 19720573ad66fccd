package provider

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Providers whose nodes share a host (local processes, Docker containers)
// give each node its own of the host's GPUs: a node of a size with GPUs
// gets that many devices no other live node holds, so its jobs never
// share a GPU with another node's.

// DetectGPUs lists the host's NVIDIA GPUs by index: from nvidia-smi -L,
// else from /dev/nvidiaN; none on a host without them.
func DetectGPUs() []string {
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
		if idx := strings.TrimPrefix(filepath.Base(d), "nvidia"); isGPUIndex(idx) {
			ids = append(ids, idx)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	return ids
}

func isGPUIndex(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0
}

// ParseGPUs reads a location's "gpus" setting: "auto" (detect; the
// default) or a list of device indices, none twice, for hosts whose
// drivers the server cannot see.
func ParseGPUs(v any) ([]string, error) {
	if s, ok := v.(string); ok && s == "auto" {
		return DetectGPUs(), nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("gpus: want auto or a list of device indices such as [0, 1, 2, 3] (got %v)", v)
	}
	var ids []string
	for _, e := range list {
		id := strings.TrimSpace(fmt.Sprint(e))
		if !isGPUIndex(id) {
			return nil, fmt.Errorf("gpus: %v is not a device index (0, 1, ...)", e)
		}
		if slices.Contains(ids, id) {
			return nil, fmt.Errorf("gpus: device %s is listed twice", id)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// CheckListedGPUs refuses a configured list naming a device the host does
// not have, when the host reports its GPUs (detected non-empty). A host
// whose drivers the server cannot see reports none: its list is taken as
// given.
func CheckListedGPUs(listed, detected []string, host string) error {
	if len(detected) == 0 {
		return nil
	}
	for _, d := range listed {
		if !slices.Contains(detected, d) {
			return fmt.Errorf("gpus: device %s is not on %s (it has %s); list only its devices, or set gpus: auto", d, host, strings.Join(detected, ", "))
		}
	}
	return nil
}

// PickGPUs returns need of the host's GPUs (all) that are not in used, in
// all's order. It fails with the reason when the host has fewer than need
// (no waiting helps) and with an *InsufficientCapacityError when too few
// are free (retry once nodes holding GPUs have gone).
func PickGPUs(all []string, used map[string]bool, need int, size, location string) ([]string, error) {
	if need <= 0 || len(all) == 0 {
		return nil, nil
	}
	if need > len(all) {
		return nil, fmt.Errorf("size %s needs %d GPUs but this location's host has %d (gpus: %s); choose a smaller size", size, need, len(all), strings.Join(all, ", "))
	}
	var free []string
	for _, d := range all {
		if !used[d] {
			free = append(free, d)
		}
	}
	if len(free) < need {
		return nil, &InsufficientCapacityError{Size: size, Location: location,
			Reason: fmt.Sprintf("the size needs %d GPUs and %d of the host's %d are free; it waits for nodes holding GPUs to go", need, len(free), len(all))}
	}
	return free[:need:need], nil
}
