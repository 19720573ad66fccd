// Package config is the tide server's configuration: where it keeps its
// data, where it listens, which locations its nodes come from, and the VM
// sizes and quotas it offers. Defaults are taken in one place (Default);
// a YAML file may override them, TIDE_* environment variables override the
// file, and flags override the environment (the CLI applies flags last).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/internal/provider"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
)

// DefaultListen is the address the server listens on when none is given.
const DefaultListen = "127.0.0.1:7430"

// Server configures `tide server`.
type Server struct {
	// DataDir holds the SQLite database, node folders and artifacts.
	// Default: $XDG_DATA_HOME/tide (~/.local/share/tide).
	DataDir string `yaml:"data_dir"`
	// Listen is the HOST:PORT the API listens on. Default 127.0.0.1:7430.
	Listen string `yaml:"listen"`
	// Store selects the backend: empty for SQLite in DataDir, or a
	// postgres:// URL.
	Store string `yaml:"store"`
	// AdvertiseURL is the URL agents and clients use to reach this server.
	// Default: http://<Listen>.
	AdvertiseURL string `yaml:"advertise_url"`
	// TLS is "auto" (the default: HTTPS with the server's own certificate
	// authority, created in the data dir on first start, unless Listen is
	// a loopback address) or "off" (plain HTTP; only behind a proxy that
	// terminates TLS). TLSCert and TLSKey, PEM files, replace the server's
	// own CA and certificate.
	TLS     string `yaml:"tls"`
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// CAFingerprint is set by the server when it serves TLS: the CA its
	// certificate chains to, which agents and clients pin.
	CAFingerprint string `yaml:"-"`
	// AgentURLs are the URLs agents are given to reach the servers: every
	// replica's, or one address in front of them. Default: AdvertiseURL.
	AgentURLs []string `yaml:"agent_urls"`
	// Replica names this server among replicas sharing a PostgreSQL store
	// (in /readyz, /metrics and the logs). Default: HOSTNAME:PORT.
	Replica string `yaml:"replica"`
	// ClientConfig is where the server writes the CLI configuration on its
	// first start. Default: api.DefaultConfigPath(). "-" disables writing.
	ClientConfig string `yaml:"client_config"`
	// Locations are where nodes come from. Default: "local" (the default
	// location) and "westus", both on the local provider, so Azure ML
	// example files that name westus run unchanged.
	Locations []Location `yaml:"locations"`
	// Sizes add to or replace sizes of the compiled-in VM size catalog.
	Sizes []api.Size `yaml:"sizes"`
	// Quotas are the vCPU limits per VM family, tier and location.
	Quotas catalog.Quotas `yaml:"quotas"`
	// Limits bound how fast each workspace may submit jobs and how many it
	// may keep queued (429 with Retry-After beyond them).
	Limits Limits `yaml:"limits"`
	// Serverless configures serverless jobs (a job file with no compute,
	// or compute: serverless): where their nodes come from and their size
	// when the job names none.
	Serverless Serverless `yaml:"serverless"`
	// Attached configures the nodes tide runs on machines users attach
	// through the API (type virtualmachine).
	Attached Attached `yaml:"attached"`
	// Clock is the server's clock (schedules, idle times, heartbeats);
	// nil means time.Now. Tests set one to put the server at a chosen
	// time; it is not read from the file.
	Clock func() time.Time `yaml:"-" json:"-"`
	// Providers builds the locations' providers by name; nil means the
	// builtin ones (package provider/builtin). Tests add providers that
	// wrap a builtin one; it is not read from the file.
	Providers provider.Registry `yaml:"-" json:"-"`
	// HeartbeatInterval is how often agents report; a node that misses
	// UnusableAfter worth of heartbeats becomes unusable.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	UnusableAfter     time.Duration `yaml:"unusable_after"`
	// MetricsOpen serves /metrics without a token (for a Prometheus that
	// cannot send one); by default it needs one, like the API.
	MetricsOpen bool `yaml:"metrics_open"`
	// SampleInterval is how often the controller records each compute's
	// state for charts (default one minute); a week of samples is kept.
	SampleInterval time.Duration `yaml:"sample_interval"`
	// BudgetInterval is how often budgets are checked against what their
	// scope spent (default one minute).
	BudgetInterval time.Duration `yaml:"budget_interval"`
	// ProvisionTimeout is how long a node may take to register.
	ProvisionTimeout time.Duration `yaml:"provision_timeout"`
	// CancelGrace is how long a canceled job gets between SIGTERM and SIGKILL.
	CancelGrace time.Duration `yaml:"cancel_grace"`
	// PreemptGrace is the eviction notice a preempted low-priority node's
	// job gets between SIGTERM and SIGKILL (a cloud gives about 30 s).
	PreemptGrace time.Duration `yaml:"preempt_grace"`
	// PreemptionRate preempts running low-priority nodes at random, this
	// many times per node-hour on average (0: never), so users can test
	// that their jobs resume from checkpoints.
	PreemptionRate float64 `yaml:"preemption_rate"`
	// Resync is the controller's safety-net period; decisions are driven by
	// events, not by this.
	Resync time.Duration `yaml:"resync"`
	// MaxDataSize bounds a code snapshot or uploaded data input (its upload
	// and what it expands to) and what a node fetches for one http(s)
	// input. Default 1G; TIDE_MAX_DATA_SIZE overrides it.
	MaxDataSize ByteSize `yaml:"max_data_size"`
	// Environments map environment names jobs refer to, typically Azure's
	// curated ones (AzureML-sklearn-1.5, which the registry reference
	// azureml://registries/azureml/environments/sklearn-1.5/labels/latest
	// also names), to an environment registered in the job's workspace:
	// NAME:VERSION or NAME@latest. A registered environment of the same
	// name wins over the mapping.
	Environments map[string]string `yaml:"environments"`
	// DefaultDatastores point workspaceblobstore or workspaceartifactstore
	// at a folder or a blob container (the same for every workspace).
	// Without it each workspace's is a folder under DataDir/datastores.
	// A workspace may register its own datastore of the same name instead.
	DefaultDatastores map[string]DatastoreConfig `yaml:"default_datastores"`
	// Storage is where the server keeps its own files: job artifacts
	// (outputs and logs), code and data snapshots, checkpoints and the
	// outputs pipeline steps hand on. Default: the data dir (type local).
	// type: azure_blob with account_name and container_name (and
	// account_key or sas_token, or TIDE_STORAGE_ACCOUNT_KEY /
	// TIDE_STORAGE_SAS_TOKEN) puts them in a blob container, so replicas
	// on different machines need no shared file system.
	Storage DatastoreConfig `yaml:"storage"`
	// SecretsKeyFile is the file holding the key workspace secrets and
	// datastore credentials are sealed with (default
	// DATA_DIR/secrets.key; TIDE_SECRETS_KEY_FILE). Replicas with their
	// own data dirs must all read the same key: a server whose key does
	// not open what the others sealed refuses to start.
	SecretsKeyFile string `yaml:"secrets_key_file"`
}

// Location is one place nodes come from.
type Location struct {
	// Name is what a compute's `location` field names.
	Name string `yaml:"name"`
	// Provider is the backend: "local" (others in later releases).
	Provider string `yaml:"provider"`
	// Default marks the location used when a compute names none.
	Default bool `yaml:"default"`
	// Runtime is how jobs run on its nodes: "process" (default: on the
	// host, as the agent's user) or "docker" (in a container of the job's
	// environment image, limited to the node's size; needs a Docker engine
	// on the node's host) or "sandbox" (in bubblewrap: own PID and mount
	// namespaces, only the job folder writable, cgroup limits where the
	// host allows them).
	Runtime string `yaml:"runtime"`
	// Settings are the provider's own settings.
	Settings map[string]any `yaml:"settings"`
	// Oversubscribe accepts, with a warning, compute sizes bigger than
	// the host that all of the location's nodes share (a local location:
	// this machine). Without it such sizes are refused, naming what the
	// host lacks.
	Oversubscribe bool `yaml:"oversubscribe"`
	// RunAs runs jobs of the process runtime as this Unix user (a name or
	// uid) instead of the agent's: a job then cannot read the agent's or
	// the server's files (tokens, the database). The agent gives the user
	// the job's folders and lets it pass through the folders above them.
	// Unset, an agent running as root runs jobs as the system user
	// tide-job (created on first use); "same-as-agent" opts out and runs
	// them as the agent's own user, root included.
	RunAs string `yaml:"run_as"`
	// NodeCacheGB bounds each node's cache of downloaded inputs (blob
	// datastore inputs and the server's data snapshots), in GiB; past it
	// the least recently used entries no running job holds are deleted.
	// 0: 10 GiB.
	NodeCacheGB float64 `yaml:"node_cache_gb"`
}

// Serverless configures the nodes of serverless jobs.
type Serverless struct {
	// InstanceType is the VM size of a serverless job that sets no
	// resources.instance_type. Default Standard_DS3_v2, as Azure's.
	InstanceType string `yaml:"instance_type"`
	// Location is where serverless nodes come from. Default: the default
	// location.
	Location string `yaml:"location"`
	// Workspaces overrides Location for single workspaces (keys are
	// workspace names), as an Azure workspace's region decides where its
	// serverless jobs run.
	Workspaces map[string]string `yaml:"workspaces"`
}

// Attached configures how the server runs a node on an attached machine
// (a compute of type virtualmachine): the ssh provider's settings that
// come from the server, not from the compute's file.
type Attached struct {
	// Binary is the tide executable copied to attached machines (when it
	// is missing there or differs). Default: the server's own executable.
	Binary string `yaml:"binary"`
	// Dir is the folder on each machine tide keeps its binary and node
	// folder in, relative to the login's home unless absolute; detaching
	// removes what tide put there. Default ".tide".
	Dir string `yaml:"dir"`
	// Timeout bounds each SSH operation (binary uploads get ten times as
	// long). Default 15s.
	Timeout time.Duration `yaml:"timeout"`
	// RunAs is the Unix user jobs run as on attached machines, as a
	// location's run_as. Default "same-as-agent": the login's user, as
	// on Azure's attached VMs.
	RunAs string `yaml:"run_as"`
	// DetachTimeout is how long a detach keeps trying to stop the agent
	// of a machine that does not answer before it forgets the node (the
	// compute's events say what may be left there). Default 2m.
	DetachTimeout time.Duration `yaml:"detach_timeout"`
	// Kubernetes are the kubernetes provider's settings for the Pods of
	// attached Kubernetes clusters (type kubernetes): image (required to
	// attach one), image_pull_policy, agent_command, work_dir,
	// service_account, image_pull_secrets, env, labels, annotations,
	// grace_period, stop_timeout. The kubeconfig, namespace and each
	// instance type's placement come from the compute.
	Kubernetes map[string]any `yaml:"kubernetes"`
}

// DefaultServerlessInstanceType is Azure ML's default serverless VM size.
const DefaultServerlessInstanceType = "Standard_DS3_v2"

// ServerlessLocation returns the location of workspace ws's serverless
// nodes.
func (c *Server) ServerlessLocation(ws string) string {
	if l := c.Serverless.Workspaces[ws]; l != "" {
		return l
	}
	if c.Serverless.Location != "" {
		return c.Serverless.Location
	}
	return c.DefaultLocation()
}

// Default returns the configuration with every default filled in.
func Default() Server {
	c := Server{Quotas: catalog.DefaultQuotas()}
	c.fill()
	return c
}

func (c *Server) fill() {
	if c.DataDir == "" {
		c.DataDir = defaultDataDir()
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.TLS == "" {
		c.TLS = "auto"
	}
	if c.AdvertiseURL == "" {
		c.AdvertiseURL = c.Scheme() + "://" + c.Listen
	}
	if c.Replica == "" {
		host, _ := os.Hostname()
		_, port, _ := strings.Cut(c.Listen, ":")
		c.Replica = host + ":" + port
	}
	if len(c.Locations) == 0 {
		c.Locations = []Location{
			{Name: "local", Provider: "local", Default: true},
			{Name: "westus", Provider: "local"},
		}
	}
	if c.Serverless.InstanceType == "" {
		c.Serverless.InstanceType = DefaultServerlessInstanceType
	}
	for i := range c.Locations {
		if c.Locations[i].Runtime == "" {
			c.Locations[i].Runtime = "process"
		}
	}
	if c.Attached.Dir == "" {
		c.Attached.Dir = ".tide"
	}
	if c.Attached.RunAs == "" {
		c.Attached.RunAs = "same-as-agent"
	}
	if c.Attached.DetachTimeout <= 0 {
		c.Attached.DetachTimeout = 2 * time.Minute
	}
	if c.Attached.Timeout <= 0 {
		c.Attached.Timeout = 15 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 2 * time.Second
	}
	if c.BudgetInterval <= 0 {
		c.BudgetInterval = time.Minute
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = time.Minute
	}
	if c.UnusableAfter == 0 {
		c.UnusableAfter = 5 * c.HeartbeatInterval
	}
	if c.ProvisionTimeout == 0 {
		c.ProvisionTimeout = 3 * time.Minute
	}
	if c.CancelGrace == 0 {
		c.CancelGrace = 10 * time.Second
	}
	if c.PreemptGrace == 0 {
		c.PreemptGrace = 30 * time.Second
	}
	if c.Resync == 0 {
		c.Resync = 30 * time.Second
	}
	if c.MaxDataSize == 0 {
		c.MaxDataSize = DefaultMaxDataSize
	}
	c.Limits.fill()
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "tide")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "tide")
	}
	return "tide-data"
}

// Load reads a YAML configuration file (path may be empty), applies TIDE_*
// environment variables, fills defaults and validates.
func Load(path string) (Server, error) {
	// Quotas start at their defaults so a file that sets some limits keeps
	// the defaults of the others.
	c := Server{Quotas: catalog.DefaultQuotas()}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("reading config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("%s: %w", path, err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err == nil {
			if err := checkWholeNumbers(&doc, reflect.TypeFor[Server](), "", path); err != nil {
				return c, err
			}
		}
	}
	if err := c.applyEnv(os.Getenv); err != nil {
		return c, err
	}
	c.fill()
	return c, c.Validate()
}

func (c *Server) applyEnv(get func(string) string) error {
	set := func(dst *string, key string) {
		if v := get(key); v != "" {
			*dst = v
		}
	}
	set(&c.DataDir, "TIDE_DATA_DIR")
	set(&c.Listen, "TIDE_LISTEN")
	set(&c.Store, "TIDE_STORE")
	set(&c.AdvertiseURL, "TIDE_ADVERTISE_URL")
	set(&c.Replica, "TIDE_REPLICA")
	set(&c.SecretsKeyFile, "TIDE_SECRETS_KEY_FILE")
	set(&c.Storage.AccountKey, "TIDE_STORAGE_ACCOUNT_KEY")
	set(&c.Storage.SASToken, "TIDE_STORAGE_SAS_TOKEN")
	if v := get("TIDE_AGENT_URLS"); v != "" {
		c.AgentURLs = strings.Split(v, ",")
	}
	if v := get("TIDE_MAX_DATA_SIZE"); v != "" {
		n, err := ParseByteSize(v)
		if err != nil {
			return fmt.Errorf("TIDE_MAX_DATA_SIZE: %w", err)
		}
		c.MaxDataSize = n
	}
	return nil
}

// AgentServerURLs returns the comma-separated server URLs handed to agents.
func (c *Server) AgentServerURLs() string {
	if len(c.AgentURLs) == 0 {
		return c.AdvertiseURL
	}
	return strings.Join(c.AgentURLs, ",")
}

// Validate checks the configuration and names the field at fault.
func (c *Server) Validate() error {
	if !strings.Contains(c.Listen, ":") {
		return fmt.Errorf("listen: want HOST:PORT, got %q", c.Listen)
	}
	if c.PreemptionRate < 0 {
		return fmt.Errorf("preemption_rate: want preemptions per node-hour, 0 or more (got %g)", c.PreemptionRate)
	}
	seen := map[string]bool{}
	defaults := 0
	for i, l := range c.Locations {
		if l.Name == "" {
			return fmt.Errorf("locations[%d].name: required", i)
		}
		if seen[l.Name] {
			return fmt.Errorf("locations[%d].name: %q is defined twice", i, l.Name)
		}
		seen[l.Name] = true
		if l.Provider == "" {
			return fmt.Errorf("locations[%d].provider: required (for example: local)", i)
		}
		if l.Default {
			defaults++
		}
		if l.Runtime != "" && !slices.Contains(Runtimes, l.Runtime) {
			return fmt.Errorf("locations[%d].runtime: %q is not a runtime; use one of %s", i, l.Runtime, strings.Join(Runtimes, ", "))
		}
		if l.RunAs != "" && l.Runtime != "" && l.Runtime != "process" {
			return fmt.Errorf("locations[%d].run_as: not supported yet with runtime %s (its jobs already see only their own folder); use it with runtime process", i, l.Runtime)
		}
		if l.NodeCacheGB < 0 {
			return fmt.Errorf("locations[%d].node_cache_gb: must be 0 (the default, 10) or more GiB (got %g)", i, l.NodeCacheGB)
		}
	}
	if defaults > 1 {
		return errors.New("locations: more than one location is marked default")
	}
	if l := c.Serverless.Location; l != "" && !seen[l] {
		return fmt.Errorf("serverless.location: %q is not a configured location; use one of %s", l, strings.Join(c.LocationNames(), ", "))
	}
	for _, ws := range slices.Sorted(maps.Keys(c.Serverless.Workspaces)) {
		if l := c.Serverless.Workspaces[ws]; !seen[l] {
			return fmt.Errorf("serverless.workspaces.%s: %q is not a configured location; use one of %s", ws, l, strings.Join(c.LocationNames(), ", "))
		}
	}
	if err := c.Quotas.Validate(); err != nil {
		return err
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	for from, to := range c.Environments {
		if strings.TrimSpace(to) == "" || strings.ContainsAny(to, " /") {
			return fmt.Errorf("environments.%s: want NAME:VERSION or NAME@latest of a registered environment, got %q", from, to)
		}
	}
	if c.UnusableAfter < c.HeartbeatInterval {
		return fmt.Errorf("unusable_after: must be at least heartbeat_interval (%s)", c.HeartbeatInterval)
	}
	if err := c.validateStorage(); err != nil {
		return err
	}
	return c.validateDatastores()
}

// Runtimes are the values of a location's runtime.
var Runtimes = []string{"process", "docker", "sandbox"}

// Runtime returns the runtime of the named location ("process" when the
// location is unknown or sets none).
func (c *Server) Runtime(location string) string {
	for _, l := range c.Locations {
		if l.Name == location && l.Runtime != "" {
			return l.Runtime
		}
	}
	return "process"
}

// RunAs is the Unix user jobs of a location run as ("" for the agent's).
func (c *Server) RunAs(location string) string {
	for _, l := range c.Locations {
		if l.Name == location {
			return l.RunAs
		}
	}
	return ""
}

// NodeCacheGB is the node cache bound of a location's nodes in GiB (0:
// the agent's default).
func (c *Server) NodeCacheGB(location string) float64 {
	for _, l := range c.Locations {
		if l.Name == location {
			return l.NodeCacheGB
		}
	}
	return 0
}

// Oversubscribes reports whether the named location accepts sizes its
// host cannot honour (Location.Oversubscribe).
func (c *Server) Oversubscribes(location string) bool {
	for _, l := range c.Locations {
		if l.Name == location {
			return l.Oversubscribe
		}
	}
	return false
}

// ProviderOf returns the provider of the named location ("" when unknown).
func (c *Server) ProviderOf(location string) string {
	for _, l := range c.Locations {
		if l.Name == location {
			return l.Provider
		}
	}
	return ""
}

// DefaultLocation is the location a compute gets when it names none.
func (c *Server) DefaultLocation() string {
	for _, l := range c.Locations {
		if l.Default {
			return l.Name
		}
	}
	if len(c.Locations) > 0 {
		return c.Locations[0].Name
	}
	return ""
}

// LocationNames lists the configured location names.
func (c *Server) LocationNames() []string {
	var names []string
	for _, l := range c.Locations {
		names = append(names, l.Name)
	}
	return names
}

// UseTLS says whether the server serves HTTPS: with a certificate given,
// or by default on any address beyond loopback.
func (c *Server) UseTLS() bool {
	if c.TLSCert != "" {
		return true
	}
	return c.TLS != "off" && !IsLoopback(c.Listen)
}

// Scheme is https when the server serves TLS, else http.
func (c *Server) Scheme() string {
	if c.UseTLS() {
		return "https"
	}
	return "http"
}

// IsLoopback reports whether a HOST:PORT listens on loopback only.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
