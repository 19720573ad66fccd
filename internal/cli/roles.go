package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

func (r *run) locationCommand() *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "List the locations nodes come from",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			ls, err := cl.Locations(ctx)
			if err != nil {
				return err
			}
			return r.printer().print(ls, func(w io.Writer) { locationTable(w, ls) })
		},
	}
	return group("location", "List locations (where nodes come from)", list)
}

func (r *run) workspaceCommand() *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "List workspaces",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			ws, err := cl.Workspaces(ctx)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(ws, func(w io.Writer) { p.workspaceTable(w, ws) })
		},
	}
	var desc string
	create := &cobra.Command{
		Use:   "create NAME [--description D]",
		Short: "Create a workspace",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			w, err := cl.PutWorkspace(ctx, api.Workspace{Name: args[0], Description: desc})
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(w, func(out io.Writer) { p.workspaceTable(out, []api.Workspace{*w}) })
		},
	}
	create.Flags().StringVar(&desc, "description", "", "description")
	return group("workspace", "List and create workspaces", list, create)
}

// version is the binary's version: the one passed in, else the module
// version the Go toolchain recorded.
func (r *run) version() string {
	if r.app.Version != "" {
		return r.app.Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func (r *run) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tide's version",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := struct {
				Version   string `json:"version"`
				GoVersion string `json:"go_version"`
				Platform  string `json:"platform"`
			}{r.version(), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}
			return r.printer().print(v, func(w io.Writer) {
				fmt.Fprintf(w, "tide %s (%s %s)\n", v.Version, v.GoVersion, v.Platform)
			})
		},
	}
}

// newLogger returns the text logger the server and agent roles write to
// standard error.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func (r *run) serverCommand() *cobra.Command {
	var (
		file, dataDir, listen, store, logLevel, replica string
		agentURLs                                       []string
		detach                                          bool
	)
	cmd := &cobra.Command{
		Use:   "server [--config FILE] [--data-dir D] [--listen HOST:PORT] [--store URL]",
		Short: "Run the tide server (API, scheduler, autoscaler, providers)",
		Long: `Run the control plane until interrupted. Settings come from the config file,
then TIDE_* environment variables (TIDE_DATA_DIR, TIDE_LISTEN, TIDE_STORE,
TIDE_ADVERTISE_URL, TIDE_REPLICA, TIDE_AGENT_URLS), then these flags. On its first start the server creates
an admin token and writes the client config the other commands read.`,
		Args: r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if r.app.Roles.Server == nil {
				return errors.New("this tide binary was built without the server")
			}
			log, err := newLogger(r.app.Stderr, logLevel)
			if err != nil {
				return err
			}
			cfg, err := config.Load(file)
			if err != nil {
				return &UsageError{Err: fmt.Errorf("server config: %w", err)}
			}
			if err := applyServerFlags(&cfg, cmd, dataDir, listen, store); err != nil {
				return err
			}
			if changed(cmd, "replica") {
				cfg.Replica = replica
			}
			if changed(cmd, "agent-url") {
				cfg.AgentURLs = agentURLs
			}
			if detach {
				return r.detach(cmd, cfg)
			}
			err = r.app.Roles.Server(cmd.Context(), cfg, log)
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				return nil // interrupted: a normal shutdown
			}
			return err
		},
	}
	f := cmd.Flags()
	// This --config is the server's YAML file; it shadows the global
	// --config (the client config), which the server does not read.
	f.StringVar(&file, "config", "", "server config YAML file")
	f.StringVar(&dataDir, "data-dir", "", "folder for the SQLite store, node folders and artifacts")
	f.StringVar(&listen, "listen", "", "HOST:PORT to listen on (default "+config.DefaultListen+")")
	f.StringVar(&store, "store", "", "store: empty for SQLite in the data dir, or a postgres:// URL")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&replica, "replica", "", "this replica's name among servers sharing a PostgreSQL store (default HOSTNAME:PORT)")
	f.StringSliceVar(&agentURLs, "agent-url", nil, "URL agents use to reach the servers; repeat for every replica (default: the advertised URL)")
	f.BoolVar(&detach, "detach", false, "run in the background: return once the server answers, log to DATA_DIR/server.log ('tide server stop' stops it)")
	cmd.AddCommand(r.serverStop())
	return cmd
}

// applyServerFlags lets flags override the loaded configuration. The
// advertised URL follows --listen when it was derived from the listen
// address rather than set explicitly.
func applyServerFlags(cfg *config.Server, cmd *cobra.Command, dataDir, listen, store string) error {
	if changed(cmd, "data-dir") {
		cfg.DataDir = dataDir
	}
	if changed(cmd, "store") {
		cfg.Store = store
	}
	if changed(cmd, "listen") {
		defaultURL := cfg.AdvertiseURL == cfg.Scheme()+"://"+cfg.Listen
		host, _ := os.Hostname()
		if _, port, _ := strings.Cut(cfg.Listen, ":"); cfg.Replica == host+":"+port {
			_, port, _ = strings.Cut(listen, ":")
			cfg.Replica = host + ":" + port
		}
		cfg.Listen = listen
		if defaultURL {
			// The scheme follows the new address: https beyond loopback.
			cfg.AdvertiseURL = cfg.Scheme() + "://" + listen
		}
	}
	if err := cfg.Validate(); err != nil {
		return &UsageError{Err: fmt.Errorf("server config: %w", err)}
	}
	return nil
}

func (r *run) agentCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "agent [agent flags]",
		Short: "Run a node agent (providers start it; not for interactive use)",
		Long: `Run the agent of one node: it registers with the server, runs the jobs it is
assigned and streams their logs and outputs. Providers start it with the
flags they need and pass the node's token in TIDE_AGENT_TOKEN.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if a == "-h" || a == "--help" {
					return cmd.Help()
				}
			}
			level := "info"
			if v := r.app.Getenv("TIDE_LOG_LEVEL"); v != "" {
				level = strings.ToLower(v)
			}
			log, err := newLogger(r.app.Stderr, level)
			if err != nil {
				return err
			}
			err = r.app.Roles.Agent(cmd.Context(), args, log)
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
}

func (r *run) demoCommand() *cobra.Command {
	var idle int
	var logLevel string
	cmd := &cobra.Command{
		Use:   "demo [--idle-seconds N]",
		Short: "Run tide's main job: a cluster scales 0 -> 2 -> 0 around example jobs",
		Long: `Start a throw-away server (SQLite store, local provider) in a temporary folder,
create a compute cluster (min_instances 0, max_instances 2), submit example jobs,
stream their logs, show the cluster scaling up and back down to 0, print a
summary, and stop everything it started.`,
		Args: r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(r.app.Stderr, logLevel)
			if err != nil {
				return err
			}
			return r.app.Roles.Demo(cmd.Context(), r.app.Stdout, log, idle)
		},
	}
	cmd.Flags().IntVar(&idle, "idle-seconds", 5, "the demo cluster's idle_time_before_scale_down")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "server log level: debug, info, warn or error")
	return cmd
}
