package slurm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/internal/provider"
)

// Config configures the slurm provider.
type Config struct {
	// SlurmConf is the slurm.conf the Slurm commands use (SLURM_CONF).
	// Default: Slurm's own default (/etc/slurm/slurm.conf).
	SlurmConf string
	// Partition is the partition of dedicated nodes. Default: the
	// cluster's default partition.
	Partition string
	// LowPriorityPartition is the partition of low_priority nodes, one
	// whose jobs Slurm may preempt. Default: Partition.
	LowPriorityPartition string
	// Account is charged for the allocations (sbatch --account).
	Account string
	// TimeLimit is each allocation's limit (sbatch --time, e.g.
	// "1-00:00:00"). Default: the partition's.
	TimeLimit string
	// ExtraArgs are added to every sbatch command (e.g. --qos=...).
	ExtraArgs []string
	// AgentCommand is the agent program and its leading arguments, as the
	// Slurm nodes see it; the agent flags are appended. Default: this
	// executable followed by "agent" (the nodes must see the same path).
	AgentCommand []string
	// WorkDir holds the node folders, <WorkDir>/<id>/; it must be on a
	// file system the Slurm nodes share with the server. Required.
	WorkDir string
	// Env is added to the agents' environment, as KEY=VALUE.
	Env []string
	// StopTimeout is how long Delete waits for a canceled job to end
	// before it removes the node's folder anyway. Default 60s.
	StopTimeout time.Duration
	// Logger receives the provider's logs. Default: discard.
	Logger *slog.Logger
}

func (c *Config) fill() error {
	if c.WorkDir == "" {
		return errors.New("work_dir: required (a folder shared with the Slurm nodes)")
	}
	if len(c.AgentCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("agent_command: finding this executable: %w", err)
		}
		c.AgentCommand = []string{exe, "agent"}
	}
	if c.LowPriorityPartition == "" {
		c.LowPriorityPartition = c.Partition
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("env: %q must be NAME=VALUE", kv)
		}
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

var settingsKeys = []string{"slurm_conf", "partition", "low_priority_partition", "account", "time_limit",
	"extra_args", "agent_command", "work_dir", "env", "stop_timeout"}

// parseSettings turns a location's settings into a Config.
func parseSettings(settings map[string]any) (Config, error) {
	var cfg Config
	for k, v := range settings {
		var err error
		switch k {
		case "slurm_conf":
			cfg.SlurmConf, err = provider.SettingString(k, v)
		case "partition":
			cfg.Partition, err = provider.SettingString(k, v)
		case "low_priority_partition":
			cfg.LowPriorityPartition, err = provider.SettingString(k, v)
		case "account":
			cfg.Account, err = provider.SettingString(k, v)
		case "time_limit":
			cfg.TimeLimit, err = provider.SettingString(k, v)
		case "work_dir":
			cfg.WorkDir, err = provider.SettingString(k, v)
		case "extra_args":
			cfg.ExtraArgs, err = provider.SettingStrings(k, v)
		case "agent_command":
			cfg.AgentCommand, err = provider.SettingStrings(k, v)
		case "env":
			m, ok := v.(map[string]any)
			if !ok {
				return cfg, fmt.Errorf("env: must be a map of NAME: value (got %T)", v)
			}
			for name, val := range m {
				cfg.Env = append(cfg.Env, fmt.Sprintf("%s=%v", name, val))
			}
			slices.Sort(cfg.Env)
		case "stop_timeout":
			cfg.StopTimeout, err = provider.SettingDuration(k, v)
		default:
			return cfg, fmt.Errorf("%s: unknown setting of the slurm provider; known: %s", k, strings.Join(settingsKeys, ", "))
		}
		if err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
