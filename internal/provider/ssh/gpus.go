package ssh

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tideml/tide/internal/provider"
)

// Nodes sharing a host share its GPUs unless each gets its own. A host's
// GPUs are listed in its settings ("gpus": [0, 1, ...]) or, by default,
// asked of the host once (nvidia-smi -L, else /dev/nvidia*). place gives a
// node of a size with GPUs that many of its host's devices that no other
// node there holds (recorded in node.json, so a new provider sees them),
// and the agent shows its jobs only those (CUDA_VISIBLE_DEVICES, the
// sandbox's /dev/nvidia*, Docker's DeviceIDs). A host without enough free
// GPUs is skipped; when no host has enough the node waits (insufficient
// capacity) or, if no host ever could, fails with the reason.

// detectScript prints the host's GPU indices, one per line.
const detectScript = `if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi -L | sed -n 's/^GPU \([0-9][0-9]*\):.*/\1/p'
else
  for d in /dev/nvidia[0-9]*; do [ -e "$d" ] && echo "${d#/dev/nvidia}"; done | sort -n
fi
`

// parseHostGPUs reads a host's "gpus" setting: "auto" or a list of indices.
func parseHostGPUs(v any) (gpus []string, detect bool, err error) {
	if s, ok := v.(string); ok && s == "auto" {
		return nil, true, nil
	}
	if _, ok := v.([]any); !ok {
		return nil, false, fmt.Errorf("gpus: want auto or a list of the host's device indices such as [0, 1] (got %v)", v)
	}
	gpus, err = provider.ParseGPUs(v)
	return gpus, false, err
}

// hostsGPUs returns each host's GPUs when a node needs some (nil for all
// hosts otherwise), detecting them on hosts that ask for it and have not
// answered yet. Hosts in errs (unreachable) are not asked.
func (p *Provider) hostsGPUs(ctx context.Context, need int, errs []error) [][]string {
	out := make([][]string, len(p.hosts))
	if need <= 0 {
		return out
	}
	for i, h := range p.hosts {
		if errs[i] != nil {
			continue
		}
		gpus, err := h.gpus(ctx, p.cfg.Timeout)
		if err != nil {
			errs[i] = fmt.Errorf("host %s: %w", h.name(), err)
			continue
		}
		out[i] = gpus
	}
	return out
}

// gpus returns the host's GPUs: the listed ones (checked against what the
// host reports, if it reports any), or those it reports. The host is asked
// once; a failed attempt is retried at the next placement.
func (h *remote) gpus(ctx context.Context, timeout time.Duration) ([]string, error) {
	h.mu.Lock()
	detected, found := h.gpusDetected, h.detectedGPUs
	h.mu.Unlock()
	if !detected {
		out, err := h.run(ctx, timeout, detectScript, nil)
		if err != nil {
			return nil, err
		}
		found = strings.Fields(string(out))
		h.mu.Lock()
		h.gpusDetected, h.detectedGPUs = true, found
		h.mu.Unlock()
	}
	if h.DetectGPUs {
		return found, nil
	}
	if err := provider.CheckListedGPUs(h.GPUs, found, "host "+h.name()); err != nil {
		return nil, err
	}
	return h.GPUs, nil
}

// gpuReason is PickGPUs's error as the reason one host cannot take a node.
func gpuReason(err error) string {
	var ic *provider.InsufficientCapacityError
	if errors.As(err, &ic) {
		return ic.Reason
	}
	return strings.Replace(err.Error(), "this location's host has", "the host has", 1)
}
