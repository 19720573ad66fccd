// Package cli is the tide command line: `tide compute`, `tide job` and the
// other verbs that talk to a server over /v1, plus the `server` and `agent`
// roles, which it only wires (the roles' code is passed in as Roles so this
// package depends on the API and nothing behind it).
//
// Commands follow `az ml compute` and `az ml job`, so an Azure ML user reads
// them without a manual. Exit codes are part of the interface (see the
// Exit* constants): scripts tell a server refusal from a typo from a missing
// resource without parsing messages.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

// Exit codes of the tide command.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitError: the server refused or failed the request, it could not be
	// reached, or (job stream, job create --stream) the job failed or was
	// canceled.
	ExitError = 1
	// ExitUsage: bad flags or arguments, or a file that does not validate.
	ExitUsage = 2
	// ExitNotFound: the named resource does not exist.
	ExitNotFound = 3
	// ExitInterrupted: the user interrupted the command (SIGINT).
	ExitInterrupted = 130
)

// Roles are the long-running parts of the binary that the CLI starts but
// does not implement; cmd/tide passes them in.
type Roles struct {
	// Server runs `tide server` until ctx ends.
	Server func(ctx context.Context, cfg config.Server, log *slog.Logger) error
	// Agent runs `tide agent ARGS` until ctx ends; args are the ones a
	// provider passes, parsed by the agent itself.
	Agent func(ctx context.Context, args []string, log *slog.Logger) error
	// Demo runs `tide demo`: an embedded server, a cluster and example jobs.
	Demo func(ctx context.Context, out io.Writer, log *slog.Logger, idleSeconds int) error
	// OwnerToken mints a token for the bootstrap owner from a server's
	// data folder (`tide token create --data-dir`).
	OwnerToken func(ctx context.Context, cfg config.Server, name string, expires time.Duration) (api.Token, error)
}

// App is one invocation's surroundings: its standard streams, environment
// and clock, so tests run the CLI in-process.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
	// Now is the clock for ages and durations (time.Now when nil).
	Now func() time.Time
	// Version is what `tide version` prints.
	Version string
	Roles   Roles
}

// UsageError is a mistake in how the command was called: exit code 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// JobOutcomeError reports that a streamed job did not complete. Its summary
// was already printed, so Run prints nothing more for it.
type JobOutcomeError struct {
	Job    string
	Status string
}

func (e *JobOutcomeError) Error() string {
	return fmt.Sprintf("job %s %s", e.Job, strings.ToLower(e.Status))
}

// ExitCode maps the error a command returned to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	var ue *UsageError
	if errors.As(err, &ue) || isValidation(err) {
		return ExitUsage
	}
	var se *SSHExitError
	if errors.As(err, &se) {
		return se.Code
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		switch {
		case api.IsNotFound(ae):
			return ExitNotFound
		case ae.Problem.Code == api.CodeValidation || ae.Problem.Code == api.CodeNotSupported ||
			ae.Problem.Code == api.CodeBadRequest:
			return ExitUsage
		case ae.Problem.Code == "" && (ae.StatusCode == http.StatusBadRequest || ae.StatusCode == http.StatusUnprocessableEntity):
			return ExitUsage
		}
	}
	return ExitError
}

// Run runs the command line args (without the program name) and returns
// the exit code.
func (a *App) Run(ctx context.Context, args []string) int {
	if a.Getenv == nil {
		a.Getenv = os.Getenv
	}
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Stdin == nil {
		a.Stdin = os.Stdin
	}
	r := &run{app: a}
	root := r.rootCommand()
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	err := root.ExecuteContext(ctx)
	if err != nil && !r.ran {
		// Cobra failed before any command ran: an unknown command, a bad
		// flag or the wrong number of arguments.
		var ue *UsageError
		if !errors.As(err, &ue) {
			err = &UsageError{Err: err}
		}
	}
	code := ExitCode(err)
	if err != nil {
		r.printError(err)
	}
	return code
}

// run is the state of one invocation.
type run struct {
	app *App
	// ran is set once flags and arguments were accepted.
	ran bool
	cmd *cobra.Command

	server, token, workspace, configPath, context, output string
	// caFingerprint is the CA the server's certificate must chain to
	// (set by endpoint).
	caFingerprint string
}

func (r *run) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tide",
		Short: "Self-hosted Azure ML compute clusters and command jobs",
		Long: `tide runs Azure ML compute clusters and command jobs on your own machines.
It reads the YAML files that 'az ml compute create -f' and 'az ml job create -f' read.

Exit codes: 0 ok, 1 error from the server (or a streamed job failed or was
canceled), 2 usage or validation error, 3 not found.`,
		Version:           r.version(),
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			r.ran = true
			r.cmd = cmd
			switch r.output {
			case "table", "json", "yaml":
			default:
				return usagef("--output %q: want table, json or yaml", r.output)
			}
			return nil
		},
	}
	root.SetVersionTemplate("tide {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&r.server, "server", "", "server URL (env TIDE_SERVER; default from the client config)")
	pf.StringVar(&r.token, "token", "", "API token (env TIDE_TOKEN; default from the client config)")
	pf.StringVarP(&r.workspace, "workspace", "w", "", "workspace (env TIDE_WORKSPACE; default from the client config, else \"default\")")
	pf.StringVar(&r.configPath, "config", "", "client config file (env TIDE_CONFIG; default $XDG_CONFIG_HOME/tide/config.json)")
	pf.StringVar(&r.context, "context", "", "the server (context) of the client config to use (env TIDE_CONTEXT; default its current one)")
	pf.StringVarP(&r.output, "output", "o", "table", "output format: table, json or yaml")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		r.cmd = cmd
		return &UsageError{Err: err}
	})
	root.AddCommand(
		r.computeCommand(),
		r.jobCommand(),
		r.datastoreCommand(),
		r.dataCommand(),
		r.environmentCommand(),
		r.componentCommand(),
		r.locationCommand(),
		r.workspaceCommand(),
		r.serverCommand(),
		r.versionCommand(),
		r.simulateCommand(),
		r.adviseCommand(),
		r.costCommand(),
		r.budgetCommand(),
		r.userCommand(),
		r.identityCommand(),
		r.tokenCommand(),
		r.roleCommand(),
		r.secretCommand(),
		r.auditCommand(),
		r.whoamiCommand(),
		r.configCommand(),
	)
	if r.app.Roles.Agent != nil {
		root.AddCommand(r.agentCommand())
	}
	if r.app.Roles.Demo != nil {
		root.AddCommand(r.demoCommand())
	}
	return root
}

// group returns a command that only holds subcommands. An unknown
// subcommand is a usage error (cobra would print help and exit 0).
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	c.AddCommand(subs...)
	return c
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func (r *run) exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			r.cmd = cmd
			return usagef("%s: want %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// client resolves the server, token and workspace (flags, then TIDE_*
// environment, then the client config file) and returns an API client.
// flagOr is a global flag's value when given, else the environment's.
func (r *run) flagOr(name, val, env string) string {
	if r.cmd != nil && r.cmd.Flags().Changed(name) {
		return val
	}
	return r.app.Getenv(env)
}

// clientConfigPath is --config, TIDE_CONFIG or the default path.
func (r *run) clientConfigPath() (string, error) {
	if path := r.flagOr("config", r.configPath, "TIDE_CONFIG"); path != "" {
		return path, nil
	}
	return api.DefaultConfigPath()
}

func (r *run) client() (*api.Client, error) {
	server, token, err := r.endpoint()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.caFingerprint != "" {
		tr.TLSClientConfig = api.PinnedTLS(r.caFingerprint)
	}
	// Bound the wait for an answer, not the whole exchange: log streams and
	// downloads legitimately take long.
	tr.ResponseHeaderTimeout = 2 * time.Minute
	c, err := api.NewClient(server, token, &http.Client{Transport: tr})
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	c.OnThrottle = func(e *api.Error, wait time.Duration, attempt int) {
		fmt.Fprintf(r.app.Stderr, "Throttled by the server (%s): %s\nSubmitting again in %s (attempt %d of %d).\n",
			e.Problem.Limit, e.Error(), wait, attempt+1, api.SubmitAttempts)
	}
	return c, nil
}

// endpoint resolves the server URL, token, workspace and pinned CA from
// flags, the environment and the client config's context, in that order.
func (r *run) endpoint() (server, token string, err error) {
	flagOr := r.flagOr
	path, err := r.clientConfigPath()
	if err != nil {
		return "", "", err
	}
	file, err := api.LoadClientConfigFile(path)
	if err != nil {
		return "", "", err
	}
	cfg, err := file.Context(flagOr("context", r.context, "TIDE_CONTEXT"))
	if err != nil {
		return "", "", &UsageError{Err: err}
	}
	server = firstNonEmpty(flagOr("server", r.server, "TIDE_SERVER"), cfg.Server, "http://"+config.DefaultListen)
	token = firstNonEmpty(flagOr("token", r.token, "TIDE_TOKEN"), cfg.Token)
	r.workspace = firstNonEmpty(flagOr("workspace", r.workspace, "TIDE_WORKSPACE"), cfg.Workspace, api.DefaultWorkspace)
	r.caFingerprint = firstNonEmpty(r.app.Getenv("TIDE_CA_FINGERPRINT"), cfg.CAFingerprint)
	return server, token, nil
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func (r *run) printer() *printer {
	return &printer{format: r.output, w: r.app.Stdout, now: r.app.Now(), loc: time.Local}
}

// printError writes err for a person: field errors one per line, and a hint
// when the server could not be reached.
func (r *run) printError(err error) {
	w := r.app.Stderr
	var je *JobOutcomeError
	var se *SSHExitError
	if errors.As(err, &je) || errors.As(err, &se) {
		return
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(w, "interrupted")
		return
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		fmt.Fprintf(w, "Error: %s\n", ae.Error())
		for _, fp := range ae.Problem.Errors {
			if ae.Problem.Detail != "" && strings.Contains(ae.Problem.Detail, fp.Message) {
				continue
			}
			line := ""
			if fp.Line > 0 {
				line = fmt.Sprintf(" (line %d)", fp.Line)
			}
			fmt.Fprintf(w, "  %s%s: %s\n", fp.Field, line, fp.Message)
		}
		if ae.StatusCode == http.StatusUnauthorized {
			fmt.Fprintln(w, "Check --token, TIDE_TOKEN or the token in the client config the server wrote on its first start.")
		}
		return
	}
	var ue *UsageError
	isUsage := errors.As(err, &ue)
	var oe *net.OpError
	var de *net.DNSError
	if !isUsage && errors.As(err, &oe) && oe.Op == "listen" {
		// The server's own listen failed: not a client that cannot connect.
		fmt.Fprintf(w, "Error: cannot listen on %v: %v\n", oe.Addr, oe.Err)
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(w, "The port is taken%s: stop that server, or start this one with --listen 127.0.0.1:PORT (env TIDE_LISTEN).\n", portOwner(oe.Addr))
		}
		return
	}
	if !isUsage && (errors.As(err, &oe) || errors.As(err, &de)) {
		fmt.Fprintf(w, "Error: cannot reach the tide server: %v\nIs it running? Start one with 'tide server', or pass --server (env TIDE_SERVER).\n", err)
		return
	}
	fmt.Fprintf(w, "Error: %s\n", err)
	if isUsage && !isValidation(err) {
		path := "tide"
		if r.cmd != nil {
			path = r.cmd.CommandPath()
		}
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", path)
	}
}

// changed reports whether the flag name was set on the running command.
func changed(cmd *cobra.Command, name string) bool {
	f := cmd.Flags().Lookup(name)
	return f != nil && f.Changed
}
