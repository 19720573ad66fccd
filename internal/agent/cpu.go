package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, in which /proc reports CPU time; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSampler measures the CPU the processes below root (its descendants,
// not root itself) used between two samples, in percent of one core.
type cpuSampler struct {
	root  int
	last  map[int]uint64 // pid -> CPU ticks at the last sample
	at    time.Time
	ready bool
}

func (s *cpuSampler) sample(now time.Time) float64 {
	cur := descendantTicks(s.root)
	defer func() { s.last, s.at, s.ready = cur, now, true }()
	if !s.ready || !now.After(s.at) {
		return 0
	}
	var used uint64
	for pid, t := range cur {
		// A process that started since the last sample counts in full.
		if prev, ok := s.last[pid]; ok && t >= prev {
			used += t - prev
		} else if !ok {
			used += t
		}
	}
	secs := now.Sub(s.at).Seconds()
	return float64(used) / clockTicks / secs * 100
}

// descendantTicks returns the user+system CPU ticks of every descendant
// of root.
func descendantTicks(root int) map[int]uint64 {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	ticks := map[int]uint64{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		parent[pid], ticks[pid] = ppid, ut+st
	}
	out := map[int]uint64{}
	for pid, t := range ticks {
		for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				out[pid] = t
				break
			}
		}
	}
	return out
}
