package local

import (
	"os"
	"path/filepath"

	"github.com/tideml/tide/internal/provider"
)

// The local provider's nodes share this host, so they share its GPUs
// unless each gets its own: Create gives a node of a size with GPUs that
// many of the host's devices that no other live node holds (recorded in its
// node.json), and its agent shows its jobs only those. A size needing more
// GPUs than are free waits (insufficient capacity, retried); one needing
// more than the host has fails with the reason.

// allocateGPUs reserves need of the host's free GPUs for node id: those
// no live node's node.json (nor a node being created) holds.
func (p *Provider) allocateGPUs(id, size, location string, need int) ([]string, error) {
	if need <= 0 || len(p.cfg.GPUs) == 0 {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	used := map[string]bool{}
	for _, devs := range p.reserved {
		for _, d := range devs {
			used[d] = true
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
				used[d] = true
			}
		}
	}
	devs, err := provider.PickGPUs(p.cfg.GPUs, used, need, size, location)
	if err != nil {
		return nil, err
	}
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
