// Command tide is the tide binary: the CLI, the server and the node agent.
// It only wires configuration to those components; see internal/cli for
// the commands.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/agent/runtime"
	"github.com/tideml/tide/internal/cli"
	"github.com/tideml/tide/internal/demo"
	"github.com/tideml/tide/internal/server"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version string

func main() {
	os.Exit(run())
}

func run() int {
	// SIGINT and SIGTERM cancel the context: the server and the agent shut
	// down gracefully, a log stream stops following.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := &cli.App{
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Version: version,
		Roles: cli.Roles{
			Server:     server.Run,
			Agent:      runAgent,
			OwnerToken: server.MintOwnerToken,
			Demo: func(ctx context.Context, out io.Writer, log *slog.Logger, idle int) error {
				return demo.Run(ctx, demo.Options{Out: out, Log: log, IdleSeconds: idle})
			},
		},
	}
	return app.Run(ctx, os.Args[1:])
}

// runAgent runs `tide agent` with the flags a provider passed and the token
// from the environment (never from argv, where other users can read it).
func runAgent(ctx context.Context, args []string, log *slog.Logger) error {
	agent.LimitProcs()
	f, err := agent.ParseFlags(args)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	token, err := agent.TakeToken(os.Args)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	cfg := f.Config(token)
	cfg.Logger = log
	cfg.Version = version
	rt, err := runtime.New(ctx, f.Runtime, runtime.Options{NodeID: f.NodeID, NodeDir: f.Dir, Network: f.Network, RunAs: f.RunAs, Limits: runtime.Limits{
		VCPUs: f.Capacity.VCPUs, MemoryBytes: int64(f.Capacity.MemoryGB * (1 << 30)), GPUs: f.Capacity.GPUs,
		GPUDevices: f.Capacity.GPUDevices,
	}})
	if err != nil {
		return err
	}
	cfg.Runtime = rt
	return agent.Run(ctx, cfg)
}
