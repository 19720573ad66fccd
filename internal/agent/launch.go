package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
)

// Distribution types, as in Azure ML job files.
const (
	distPyTorch    = "pytorch"
	distMPI        = "mpi"
	distTensorFlow = "tensorflow"
)

// launchProc is one process the agent starts for an assignment.
type launchProc struct {
	// Command is the shell command line.
	Command string
	// Env is added to the job's environment for this process only.
	Env map[string]string
	// Label prefixes the process's log lines when the node runs more than
	// one process ("[rank 3] "), so every rank's lines can be told apart.
	Label string
}

// launch is what one node runs for an assignment: its processes, files to
// write into the job folder first (an MPI hostfile), and notes for the log.
type launch struct {
	Procs []launchProc
	// Files are absolute paths, with their content.
	Files map[string]string
	Notes []string
}

// planLaunch decides the processes of node as.NodeRank for command (the
// job's command with its bindings substituted) run in the job folder dir
// (node 0 of an MPI job writes its hostfile to dir/.tide). root says whether the agent
// runs as root (mpirun refuses that unless told). It does no I/O.
//
// Without a distribution the node runs command once. pytorch runs
// process_count_per_instance processes (default 1), each with the variables
// torchrun would set: MASTER_ADDR (node 0's address), MASTER_PORT,
// WORLD_SIZE, RANK = NODE_RANK * ppn + LOCAL_RANK, NODE_RANK, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK. mpi launches every process from node 0 with
// mpirun and a hostfile listing each node's address with ppn slots (nodes on
// one host, as local nodes are, become one entry with all their slots, and
// --oversubscribe lets them exceed the host's cores); the other nodes hold
// their slot until node 0 ends. tensorflow runs worker_count workers
// (default: one per node) and parameter_server_count parameter servers
// spread over the nodes, each with TF_CONFIG.
func planLaunch(as api.Assignment, command, dir string, root bool) (launch, error) {
	d := as.Distribution
	if d == nil {
		return launch{Procs: []launchProc{{Command: command}}}, nil
	}
	nodes := max(as.NodeCount, 1)
	var l launch
	hosts := make([]string, nodes)
	for i := range hosts {
		host := ""
		if i < len(as.Nodes) {
			host = hostOf(as.Nodes[i])
		}
		if host == "" {
			host = "127.0.0.1"
			if i == 0 {
				l.Notes = append(l.Notes, "tide: node 0 reported no address; the launcher uses 127.0.0.1")
			}
		}
		hosts[i] = host
	}
	switch d.Type {
	case distPyTorch:
		ppn := max(d.ProcessCountPerInstance, 1)
		for local := range ppn {
			p := launchProc{Command: command, Env: map[string]string{
				"MASTER_ADDR":      hosts[0],
				"MASTER_PORT":      strconv.Itoa(as.MasterPort),
				"WORLD_SIZE":       strconv.Itoa(nodes * ppn),
				"RANK":             strconv.Itoa(as.NodeRank*ppn + local),
				"NODE_RANK":        strconv.Itoa(as.NodeRank),
				"GROUP_RANK":       strconv.Itoa(as.NodeRank),
				"LOCAL_RANK":       strconv.Itoa(local),
				"LOCAL_WORLD_SIZE": strconv.Itoa(ppn),
			}}
			if ppn > 1 {
				p.Label = fmt.Sprintf("[rank %d] ", as.NodeRank*ppn+local)
			}
			l.Procs = append(l.Procs, p)
		}
	case distMPI:
		ppn := max(d.ProcessCountPerInstance, 1)
		if as.NodeRank != 0 {
			l.Notes = append(l.Notes, fmt.Sprintf("tide: mpi: node %d holds its %d slot(s); mpirun on node 0 (%s) starts the processes", as.NodeRank, ppn, hosts[0]))
			l.Procs = []launchProc{{Command: "exec sleep infinity"}}
			return l, nil
		}
		hostfile := filepath.Join(dir, ".tide", "hostfile")
		env := map[string]string{
			"TIDE_MPI_HOSTFILE":          hostfile,
			"AZ_BATCHAI_MPI_MASTER_NODE": hosts[0],
		}
		if root {
			// mpirun refuses to run as root without both of these.
			env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
			env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
		}
		l.Files = map[string]string{hostfile: mpiHostfile(hosts, ppn)}
		l.Procs = []launchProc{{
			Command: fmt.Sprintf("exec mpirun --hostfile %s -np %d --oversubscribe /bin/sh -c %s", shellQuote(hostfile), nodes*ppn, shellQuote(command)),
			Env:     env,
		}}
		l.Notes = append(l.Notes, fmt.Sprintf("tide: mpi: mpirun starts %d process(es) on %d node(s), %d per node", nodes*ppn, nodes, ppn))
	case distTensorFlow:
		workers := d.WorkerCount
		if workers < 1 {
			workers = nodes
		}
		tasks := workers + d.ParameterServerCount
		perNode := (tasks + nodes - 1) / nodes
		cluster := map[string][]string{}
		taskOf := func(g int) (string, int) {
			if g < workers {
				return "worker", g
			}
			return "ps", g - workers
		}
		for g := range tasks {
			kind, _ := taskOf(g)
			cluster[kind] = append(cluster[kind], net.JoinHostPort(hosts[g/perNode], strconv.Itoa(as.MasterPort+g)))
		}
		first, last := as.NodeRank*perNode, min((as.NodeRank+1)*perNode, tasks)
		for g := first; g < last; g++ {
			kind, index := taskOf(g)
			cfg, err := json.Marshal(map[string]any{"cluster": cluster, "task": map[string]any{"type": kind, "index": index}})
			if err != nil {
				return launch{}, fmt.Errorf("encoding TF_CONFIG: %w", err)
			}
			p := launchProc{Command: command, Env: map[string]string{"TF_CONFIG": string(cfg)}}
			if last-first > 1 {
				p.Label = fmt.Sprintf("[%s %d] ", kind, index)
			}
			l.Procs = append(l.Procs, p)
		}
		if len(l.Procs) == 0 {
			l.Notes = append(l.Notes, fmt.Sprintf("tide: tensorflow: node %d has no task (%d task(s) on %d node(s))", as.NodeRank, tasks, nodes))
			l.Procs = []launchProc{{Command: "true"}}
		}
	default:
		return launch{}, fmt.Errorf("distribution.type: %q is not a launcher this agent knows (pytorch, mpi, tensorflow)", d.Type)
	}
	return l, nil
}

// hostOf strips a port from a node address.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// mpiHostfile lists each host once with all the slots of its nodes, in
// node order. Loopback addresses are written as localhost, which mpirun
// starts locally instead of through ssh.
func mpiHostfile(hosts []string, ppn int) string {
	var order []string
	slots := map[string]int{}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
			h = "localhost"
		}
		if _, ok := slots[h]; !ok {
			order = append(order, h)
		}
		slots[h] += ppn
	}
	var b strings.Builder
	for _, h := range order {
		fmt.Fprintf(&b, "%s slots=%d\n", h, slots[h])
	}
	return b.String()
}

// shellQuote quotes s as one /bin/sh word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// hostEnvironment applies a registered environment's tide block to env:
// its variables, and PATH with a folder of python/python3 links to the
// interpreter, the interpreter's folder and the extra folders first. The
// job's own environment_variables are applied after, so they win. shimDir
// is where the links go; it fails when the interpreter is missing on this
// node, since every python command would run the wrong one.
func hostEnvironment(e *api.Environment, env map[string]string, shimDir string) error {
	if e == nil || e.Tide == nil {
		return nil
	}
	h := e.Tide
	for k, v := range h.Variables {
		env[k] = v
	}
	var head []string
	if h.Python != "" {
		if _, err := os.Stat(h.Python); err != nil {
			return fmt.Errorf("environment %s:%s: tide.python %s is not on this node (%w); install it or register a version that names the node's interpreter", e.Name, e.Version, h.Python, err)
		}
		if err := os.MkdirAll(shimDir, 0o755); err != nil {
			return fmt.Errorf("preparing environment %s:%s: %w", e.Name, e.Version, err)
		}
		for _, name := range []string{"python", "python3"} {
			link := filepath.Join(shimDir, name)
			_ = os.Remove(link)
			if err := os.Symlink(h.Python, link); err != nil {
				return fmt.Errorf("preparing environment %s:%s: %w", e.Name, e.Version, err)
			}
		}
		head = append(head, shimDir, filepath.Dir(h.Python))
	}
	head = append(head, h.Path...)
	if len(head) > 0 {
		if old := env["PATH"]; old != "" {
			head = append(head, old)
		}
		env["PATH"] = strings.Join(slices.Compact(head), ":")
	}
	return nil
}

// group is the processes of one node as one runtime.Handle. Wait returns
// when every process has exited, with the first failing exit code (0 when
// all succeeded); the first failure stops the others, as one failing rank
// fails the whole job. Pid is the first process's: an agent restarted while
// a group runs finds and stops that one only.
type group struct {
	hs    []runtime.Handle
	grace time.Duration

	mu   sync.Mutex
	done []bool // a process that exited is never signalled: its pid may be reused
}

func newGroup(hs []runtime.Handle, grace time.Duration) runtime.Handle {
	if len(hs) == 1 {
		return hs[0]
	}
	return &group{hs: hs, grace: grace, done: make([]bool, len(hs))}
}

func (g *group) Pid() int { return g.hs[0].Pid() }

func (g *group) Wait() (int, error) {
	type result struct {
		i, code int
		err     error
	}
	results := make(chan result, len(g.hs))
	for i, h := range g.hs {
		go func() {
			code, err := h.Wait()
			results <- result{i, code, err}
		}()
	}
	first := 0
	var errs []error
	for range g.hs {
		r := <-results
		g.mu.Lock()
		g.done[r.i] = true
		g.mu.Unlock()
		errs = append(errs, r.err)
		if r.code != 0 && first == 0 {
			first = r.code
			g.Stop(g.grace)
		}
	}
	return first, errors.Join(errs...)
}

func (g *group) Stop(grace time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, h := range g.hs {
		if !g.done[i] {
			h.Stop(grace)
		}
	}
}

// labeled prefixes the lines emit receives with label.
func labeled(label string, emit func(string)) func(string) {
	if label == "" {
		return emit
	}
	return func(s string) { emit(label + s) }
}

// outputs collects the line writers of a group, to flush them all.
type outputs struct {
	mu sync.Mutex
	ws []*lineWriter
}

func (o *outputs) add(emit func(string)) *lineWriter {
	w := &lineWriter{emit: emit}
	o.mu.Lock()
	o.ws = append(o.ws, w)
	o.mu.Unlock()
	return w
}

func (o *outputs) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.ws {
		w.flush()
	}
}

// portFree reports whether port can be listened on here (on every address).
func portFree(port int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
