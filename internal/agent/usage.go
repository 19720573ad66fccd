package agent

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
)

// clockTicks is the kernel's USER_HZ, in which /proc reports CPU time; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// pageSize converts /proc's resident pages to bytes.
var pageSize = int64(os.Getpagesize())

// proc is one process as /proc/PID/stat tells it.
type proc struct {
	ppid int
	// ticks is the process's own user+system CPU time plus that of the
	// children it has waited for, so a tree's sum counts every process
	// that ran in it once, ended ones included.
	ticks uint64
	rss   int64 // bytes
}

// readProcs reads the processes below roots (themselves included), one
// pass for all jobs: each process's children are listed by
// /proc/PID/task/TID/children, so a heartbeat reads the agent's own
// process tree and not every process of the host (each beat read all of
// /proc; on a host of a few hundred processes that was a few hundred
// files a second per agent). Where the kernel lists no children
// (CONFIG_PROC_CHILDREN unset) it reads every process, as tree needs; and
// so it does once the trees took more than maxTreeFiles files (a children
// file per thread: jobs of many threaded processes), which bounds a beat's
// reads by what reading every process costs, plus that budget.
func readProcs(roots ...int) map[int]proc {
	out := map[int]proc{}
	todo := slices.Clone(roots)
	files := 0
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, seen := out[pid]; seen {
			continue
		}
		p, ok := readProc(pid)
		if !ok {
			continue
		}
		out[pid] = p
		kids, n, ok := children(pid)
		if !ok {
			return readAllProcs()
		}
		if files += 1 + n; files > maxTreeFiles {
			return readAllProcs()
		}
		todo = append(todo, kids...)
	}
	return out
}

// maxTreeFiles bounds the files readProcs reads by following trees; a
// variable for tests.
var maxTreeFiles = 512

// children lists pid's children from each of its threads' children file
// (n files); ok is false when the kernel has no such file (a process that
// ended meanwhile has none either, and has no children left to list: ok).
func children(pid int) (kids []int, n int, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, true
	}
	var buf [512]byte
	for _, t := range tasks {
		b, err := readFile(dir+"/"+t.Name()+"/children", buf[:])
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(dir + "/" + t.Name()); serr == nil {
				return nil, 0, false // the thread is there, its children file is not
			}
		}
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids, len(tasks), true
}

// readAllProcs reads every process of the host.
func readAllProcs() map[int]proc {
	entries, _ := os.ReadDir("/proc")
	out := make(map[int]proc, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out[pid] = p
		}
	}
	return out
}

// readProc reads /proc/PID/stat.
func readProc(pid int) (proc, bool) {
	// Fields after the command: state(0) ppid(1) ... utime(11)
	// stime(12) cutime(13) cstime(14) ... rss(21).
	f := procStat(pid)
	if len(f) < 22 {
		return proc{}, false
	}
	var p proc
	p.ppid, _ = strconv.Atoi(f[1])
	for _, k := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseInt(f[k], 10, 64)
		if v > 0 {
			p.ticks += uint64(v)
		}
	}
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	p.rss = pages * pageSize
	return p, true
}

// procStat returns the fields of /proc/PID/stat after the command name
// (which may hold spaces): the process's state first; nil when it cannot
// be read.
func procStat(pid int) []string {
	var buf [1024]byte
	b, err := readFile("/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// readFile reads a small file, such as one of /proc, into buf, with plain
// system calls; a longer one is read by os.ReadFile. os.ReadFile made ten
// calls for one of /proc's files: opening it, offering it to the network
// poller (four fcntl and an epoll_ctl, all for nothing: the poller refuses
// such files), fstat, two reads and closing it; this makes three or four.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	for n := 0; n < len(buf); {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
	return os.ReadFile(path)
}

// tree sums the CPU ticks and resident memory of roots and their
// descendants.
func tree(procs map[int]proc, roots ...int) (ticks uint64, rss int64) {
	in := map[int]bool{}
	for _, r := range roots {
		if _, ok := procs[r]; ok {
			in[r] = true
		}
	}
	for pid, p := range procs {
		if in[pid] {
			continue
		}
		for q, hops := p.ppid, 0; q > 1 && hops < 64; q, hops = procs[q].ppid, hops+1 {
			if in[q] {
				in[pid] = true
				break
			}
		}
	}
	for pid := range in {
		ticks += procs[pid].ticks
		rss += procs[pid].rss
	}
	return ticks, rss
}

// gpuReading is the node's GPUs at one moment, from nvidia-smi.
type gpuReading struct {
	percent  float64
	memBytes int64
	ok       bool
}

// readGPUs asks nvidia-smi for the GPUs' utilisation and memory in use,
// averaged (utilisation) and summed (memory) over the GPUs listed; ok is
// false without nvidia-smi or GPUs.
func readGPUs(ctx context.Context) gpuReading {
	bin, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return gpuReading{}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return gpuReading{}
	}
	var r gpuReading
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 2 {
			continue
		}
		u, err1 := strconv.ParseFloat(strings.TrimSpace(f[0]), 64)
		m, err2 := strconv.ParseFloat(strings.TrimSpace(f[1]), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		r.percent += u
		r.memBytes += int64(m * 1024 * 1024)
		n++
	}
	if n == 0 {
		return gpuReading{}
	}
	r.percent /= float64(n)
	r.ok = true
	return r
}

// usage accumulates what one job used across samples.
type usage struct {
	mu     sync.Mutex
	u      api.JobUsage
	gpuSum float64
	gpuN   int
}

// add takes one sample of the job's process tree (roots are its
// processes' pids) and the node's GPUs.
func (us *usage) add(procs map[int]proc, roots []int, gpu gpuReading, dir string) api.JobUsage {
	ticks, rss := tree(procs, roots...)
	disk := dirSize(dir, 200_000)
	us.mu.Lock()
	defer us.mu.Unlock()
	if cpu := float64(ticks) / clockTicks; cpu > us.u.CPUSeconds {
		// Never backwards: an ended process's time reaches its parent's
		// only once the parent waits for it.
		us.u.CPUSeconds = cpu
	}
	if len(roots) > 0 {
		us.u.MemoryBytes = rss
	}
	us.u.PeakMemoryBytes = max(us.u.PeakMemoryBytes, rss)
	us.u.DiskBytes = disk
	if gpu.ok {
		us.gpuSum += gpu.percent
		us.gpuN++
		mean := us.gpuSum / float64(us.gpuN)
		us.u.GPUPercent = &mean
		us.u.GPUMemoryBytes = max(us.u.GPUMemoryBytes, gpu.memBytes)
	}
	us.u.Samples++
	return us.u
}

func (us *usage) get() api.JobUsage {
	us.mu.Lock()
	defer us.mu.Unlock()
	return us.u
}

// handlePids returns the pids of a job's processes: one per process the
// launcher started on this node.
func handlePids(h runtime.Handle) []int {
	if h == nil {
		return nil
	}
	if g, ok := h.(*group); ok {
		out := make([]int, 0, len(g.hs))
		for _, x := range g.hs {
			out = append(out, x.Pid())
		}
		return out
	}
	return []int{h.Pid()}
}

// dirSize adds up the sizes of the files below dir, reading at most limit
// entries (a job folder of millions of files is not walked every
// heartbeat).
func dirSize(dir string, limit int) int64 {
	var total int64
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > limit {
			return filepath.SkipAll
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// nodeSampler measures the whole node (the agent and every process below
// it) between heartbeats.
type nodeSampler struct {
	lastTicks uint64
	at        time.Time
}

func (s *nodeSampler) sample(procs map[int]proc, gpu gpuReading, now time.Time) *api.NodeUtilization {
	ticks, rss := tree(procs, os.Getpid())
	u := &api.NodeUtilization{MemoryBytes: rss}
	if !s.at.IsZero() && now.After(s.at) && ticks >= s.lastTicks {
		u.CPUPercent = float64(ticks-s.lastTicks) / clockTicks / now.Sub(s.at).Seconds() * 100
	}
	s.lastTicks, s.at = ticks, now
	if gpu.ok {
		p := gpu.percent
		u.GPUPercent, u.GPUMemoryBytes = &p, gpu.memBytes
	}
	return u
}
