package ssh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/internal/provider"
)

// Host is one machine nodes may run on.
type Host struct {
	// Address is the host name or IP address sshd listens on. Required.
	Address string
	// Port is sshd's port. Default 22.
	Port int
	// User is the remote user the agents run as. Default: root.
	User string
	// KeyFile is the private key to log in with (OpenSSH or PEM format,
	// unencrypted). Empty: use the keys of the ssh-agent at $SSH_AUTH_SOCK.
	KeyFile string
	// PrivateKey is the private key itself, for a host whose key is kept
	// elsewhere than a file (an attached machine's, in a workspace
	// secret). It wins over KeyFile.
	PrivateKey []byte
	// HostKey pins the host's public key, in authorized_keys format
	// ("ssh-ed25519 AAAA..."). Empty: the location's KnownHosts file
	// must list the host.
	HostKey string
	// Capacity is how many nodes the host runs at most. Default 1.
	Capacity int
	// Dir is the remote folder tide keeps the binary and node folders in;
	// a relative path is relative to the user's home. Default ".tide".
	Dir string
	// GPUs are the host's GPU device indices that nodes get, disjoint
	// between the host's nodes (see gpus.go). With DetectGPUs the
	// provider asks the host instead (nvidia-smi -L, else /dev/nvidia*).
	GPUs       []string
	DetectGPUs bool
}

// name is how logs and errors name the host.
func (h Host) name() string {
	return h.User + "@" + net.JoinHostPort(h.Address, strconv.Itoa(h.Port))
}

// Config configures the ssh provider.
type Config struct {
	// Hosts are the machines nodes run on. At least one.
	Hosts []Host
	// KnownHosts is an OpenSSH known_hosts file that verifies the host
	// keys of hosts without a pinned HostKey.
	KnownHosts string
	// Binary is the local tide executable copied to the hosts (when it is
	// missing there or its sha256 differs). Default: this executable.
	Binary string
	// Env is added to the agents' environment, as KEY=VALUE.
	Env []string
	// GracePeriod is how long Delete waits after SIGTERM before SIGKILL.
	// Default 30s.
	GracePeriod time.Duration
	// Timeout bounds each ssh operation except binary uploads (which get
	// ten times as long). Default 15s.
	Timeout time.Duration
	// Logger receives the provider's logs. Default: discard.
	Logger *slog.Logger
}

func (c *Config) fill() error {
	if len(c.Hosts) == 0 {
		return errors.New("hosts: at least one host is required")
	}
	seen := map[string]bool{}
	for i := range c.Hosts {
		h := &c.Hosts[i]
		if h.Address == "" {
			return fmt.Errorf("hosts[%d].address: required", i)
		}
		if h.Port == 0 {
			h.Port = 22
		}
		if h.Port < 0 || h.Port > 65535 {
			return fmt.Errorf("hosts[%d].port: must be 1-65535 (got %d)", i, h.Port)
		}
		if h.User == "" {
			h.User = "root"
		}
		if h.Capacity == 0 {
			h.Capacity = 1
		}
		if h.Capacity < 0 {
			return fmt.Errorf("hosts[%d].capacity: must be >= 1 (got %d)", i, h.Capacity)
		}
		if h.Dir == "" {
			h.Dir = ".tide"
		}
		if h.HostKey == "" && c.KnownHosts == "" {
			return fmt.Errorf("hosts[%d].host_key: required unless the location sets known_hosts; host keys are always verified", i)
		}
		key := h.name() + " " + h.Dir
		if seen[key] {
			return fmt.Errorf("hosts[%d]: %s with dir %s is listed twice", i, h.name(), h.Dir)
		}
		seen[key] = true
	}
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("binary: finding this executable: %w", err)
		}
		c.Binary = exe
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || !validEnvName(k) {
			return fmt.Errorf("env: %q must be NAME=VALUE with a shell variable name", kv)
		}
	}
	if c.GracePeriod <= 0 {
		c.GracePeriod = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// settingsKeys and hostKeys are the settings a location may give.
var (
	settingsKeys = []string{"hosts", "known_hosts", "binary", "env", "grace_period", "timeout"}
	hostKeys     = []string{"address", "port", "user", "key_file", "host_key", "capacity", "dir", "gpus"}
)

// parseSettings turns a location's settings into a Config.
func parseSettings(settings map[string]any) (Config, error) {
	var cfg Config
	for k, v := range settings {
		var err error
		switch k {
		case "hosts":
			list, ok := v.([]any)
			if !ok {
				return cfg, fmt.Errorf("hosts: must be a list of hosts (got %T)", v)
			}
			for i, e := range list {
				m, ok := e.(map[string]any)
				if !ok {
					return cfg, fmt.Errorf("hosts[%d]: must be a map with %s (got %T)", i, strings.Join(hostKeys, ", "), e)
				}
				h, err := parseHost(m)
				if err != nil {
					return cfg, fmt.Errorf("hosts[%d].%w", i, err)
				}
				cfg.Hosts = append(cfg.Hosts, h)
			}
		case "known_hosts":
			cfg.KnownHosts, err = provider.SettingString(k, v)
		case "binary":
			cfg.Binary, err = provider.SettingString(k, v)
		case "env":
			m, ok := v.(map[string]any)
			if !ok {
				return cfg, fmt.Errorf("env: must be a map of NAME: value (got %T)", v)
			}
			for name, val := range m {
				cfg.Env = append(cfg.Env, fmt.Sprintf("%s=%v", name, val))
			}
			slices.Sort(cfg.Env)
		case "grace_period":
			cfg.GracePeriod, err = provider.SettingDuration(k, v)
		case "timeout":
			cfg.Timeout, err = provider.SettingDuration(k, v)
		default:
			return cfg, fmt.Errorf("%s: unknown setting of the ssh provider; known: %s", k, strings.Join(settingsKeys, ", "))
		}
		if err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func parseHost(m map[string]any) (Host, error) {
	// A host's GPUs are detected unless the location lists them.
	h := Host{DetectGPUs: true}
	for k, v := range m {
		var err error
		switch k {
		case "address":
			h.Address, err = provider.SettingString(k, v)
		case "port":
			h.Port, err = provider.SettingInt(k, v)
		case "user":
			h.User, err = provider.SettingString(k, v)
		case "key_file":
			h.KeyFile, err = provider.SettingString(k, v)
		case "host_key":
			h.HostKey, err = provider.SettingString(k, v)
		case "capacity":
			h.Capacity, err = provider.SettingInt(k, v)
		case "dir":
			h.Dir, err = provider.SettingString(k, v)
		case "gpus":
			h.GPUs, h.DetectGPUs, err = parseHostGPUs(v)
		default:
			return h, fmt.Errorf("%s: unknown host setting; known: %s", k, strings.Join(hostKeys, ", "))
		}
		if err != nil {
			return h, err
		}
	}
	return h, nil
}
