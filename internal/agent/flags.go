package agent

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
)

// TokenEnv is the environment variable that carries the agent's token.
// Providers pass the token this way, never on the command line, where any
// user of the machine can read it.
const TokenEnv = "TIDE_AGENT_TOKEN"

// Flags is the command-line contract between providers and `tide agent`:
// providers build the arguments with Args, the command parses them with
// ParseFlags, so the two cannot drift apart.
type Flags struct {
	// ServerURLs are the servers' base URLs (--server, comma-separated or repeated).
	ServerURLs []string
	NodeID     string
	Dir        string
	Capacity   api.Capacity
	// Address is how the other nodes of a gang reach this one (--address):
	// MASTER_ADDR of distributed jobs whose node 0 this is. Optional.
	Address string
	// Runtime runs the jobs: "process" (default), "docker" or "sandbox".
	Runtime string
	// Network is the compute's network_settings.vnet_name: the Docker
	// network of the docker runtime's containers; "none" gives jobs no
	// network on the docker and sandbox runtimes. Empty: the default.
	Network string
	// CAFingerprint pins the CA the server's certificate must chain to
	// (--ca-fingerprint); empty trusts the system's CAs.
	CAFingerprint string
	// RunAs runs jobs as this Unix user (--run-as; process runtime).
	RunAs string
	// CacheGB bounds the node cache of downloaded inputs, in GiB
	// (--cache-gb); 0: nodecache.DefaultLimit.
	CacheGB float64
}

// Args returns the command-line arguments for f (without the "agent" verb).
func (f Flags) Args() []string {
	return []string{
		"--server", strings.Join(f.ServerURLs, ","),
		"--node-id", f.NodeID,
		"--dir", f.Dir,
		"--vcpus", strconv.Itoa(f.Capacity.VCPUs),
		"--memory-gb", strconv.FormatFloat(f.Capacity.MemoryGB, 'f', -1, 64),
		"--gpus", strconv.Itoa(f.Capacity.GPUs),
		"--gpu-devices", strings.Join(f.Capacity.GPUDevices, ","),
		"--capacity-note", f.Capacity.Note,
		"--address", f.Address,
		"--runtime", cmp.Or(f.Runtime, "process"),
		"--network", f.Network,
		"--ca-fingerprint", f.CAFingerprint,
		"--run-as", f.RunAs,
		"--cache-gb", strconv.FormatFloat(f.CacheGB, 'f', -1, 64),
	}
}

// ParseFlags parses the arguments Args produces.
func ParseFlags(args []string) (Flags, error) {
	var f Flags
	var servers string
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&servers, "server", "", "server base URLs, comma-separated")
	fs.StringVar(&f.NodeID, "node-id", "", "node id the agent registers as")
	fs.StringVar(&f.Dir, "dir", "", "the node's folder (jobs, checkpoints, state)")
	fs.IntVar(&f.Capacity.VCPUs, "vcpus", 0, "logical vCPUs offered")
	fs.Float64Var(&f.Capacity.MemoryGB, "memory-gb", 0, "logical memory offered, in GB")
	fs.IntVar(&f.Capacity.GPUs, "gpus", 0, "GPUs offered")
	var devices string
	fs.StringVar(&devices, "gpu-devices", "", "the host GPUs (indices, comma-separated) this node's jobs may use")
	fs.StringVar(&f.Capacity.Note, "capacity-note", "", "note on the capacity, e.g. that it is logical")
	fs.StringVar(&f.Address, "address", "", "address other nodes of a distributed job reach this node at")
	fs.StringVar(&f.Runtime, "runtime", "process", "how jobs run: process, docker or sandbox")
	fs.StringVar(&f.Network, "network", "", "the jobs' network (docker and sandbox runtimes): a Docker network name, or none")
	fs.StringVar(&f.RunAs, "run-as", "", "run jobs as this Unix user (process runtime)")
	fs.Float64Var(&f.CacheGB, "cache-gb", 0, "bound of the node's cache of downloaded inputs, in GiB (0: 10)")
	fs.StringVar(&f.CAFingerprint, "ca-fingerprint", "", "SHA-256 of the CA the server's certificate must chain to")
	if err := fs.Parse(args); err != nil {
		return Flags{}, fmt.Errorf("agent flags: %w", err)
	}
	if fs.NArg() > 0 {
		return Flags{}, fmt.Errorf("agent flags: unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.ServerURLs = append(f.ServerURLs, s)
		}
	}
	for _, d := range strings.Split(devices, ",") {
		if d = strings.TrimSpace(d); d != "" {
			f.Capacity.GPUDevices = append(f.Capacity.GPUDevices, d)
		}
	}
	return f, nil
}

// Config returns an agent Config for f, with the given token; the caller
// sets the logger and anything else.
func (f Flags) Config(token string) Config {
	c := Config{ServerURLs: f.ServerURLs, NodeID: f.NodeID, Token: token, Dir: f.Dir, Capacity: f.Capacity, Address: f.Address, RuntimeName: f.Runtime, CacheBytes: int64(f.CacheGB * (1 << 30))}
	if f.CAFingerprint != "" {
		// A server whose certificate does not chain to the pinned CA is
		// refused, and every request's error says so.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = api.PinnedTLS(f.CAFingerprint)
		c.HTTPClient = &http.Client{Transport: tr}
	}
	return c
}
