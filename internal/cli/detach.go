package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/internal/config"
)

// detachWait bounds how long `tide server --detach` waits for the server.
const detachWait = 60 * time.Second

// detach starts this command again as a background server (its own
// session, output to DATA_DIR/server.log, its pid in DATA_DIR/server.pid)
// and returns once the server answers /readyz, so the next command can use
// it at once.
func (r *run) detach(cmd *cobra.Command, cfg config.Server) error {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("--detach: %w", err)
	}
	logPath := filepath.Join(cfg.DataDir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("--detach: %w", err)
	}
	defer logFile.Close()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--detach: %w", err)
	}
	args := slices.DeleteFunc(slices.Clone(os.Args[1:]), func(a string) bool { return a == "--detach" || a == "--detach=true" })
	child := exec.Command(exe)
	// The same argv[0]: a binary that dispatches on its name (tests) runs
	// the same program again.
	child.Args = append([]string{os.Args[0]}, args...)
	child.Stdout, child.Stderr = logFile, logFile
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return fmt.Errorf("--detach: starting the server: %w", err)
	}
	pidPath := filepath.Join(cfg.DataDir, "server.pid")
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(child.Process.Pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("--detach: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	url := cfg.Scheme() + "://" + cfg.Listen + "/readyz"
	// Only whether the child answers is asked (no token is sent), so a TLS
	// server's certificate need not be checked here; clients pin its CA.
	probe := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(detachWait)
	for {
		select {
		case err := <-exited:
			os.Remove(pidPath)
			tail, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
			return fmt.Errorf("the server exited (%v); the end of %s:\n%s", err, logPath, strings.Join(lines[max(len(lines)-5, 0):], "\n"))
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := probe.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Fprintf(r.app.Stdout, "tide server listening on %s://%s (pid %d); log in %s; stop it with: tide server stop --data-dir %s\n",
					cfg.Scheme(), cfg.Listen, child.Process.Pid, logPath, cfg.DataDir)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not answer %s within %s; see %s", url, detachWait, logPath)
		}
	}
}

func (r *run) serverStop() *cobra.Command {
	var dataDir string
	var nodes bool
	cmd := &cobra.Command{
		Use:   "stop [--data-dir D] [--nodes]",
		Short: "Stop a server started with --detach (and, with --nodes, its local nodes' agents)",
		Long: `Stop the server whose pid is in DATA_DIR/server.pid (SIGTERM, then wait for
it to finish its requests). Local nodes' agents run on by design (a server
restart must not stop jobs); --nodes stops them too, jobs included.`,
		Args: r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load("")
			if err != nil {
				return err
			}
			if err := applyServerFlags(&cfg, cmd, dataDir, "", ""); err != nil {
				return err
			}
			pidPath := filepath.Join(cfg.DataDir, "server.pid")
			b, err := os.ReadFile(pidPath)
			if errors.Is(err, os.ErrNotExist) {
				return usagef("no %s: no server was started with --detach on this data folder", pidPath)
			}
			if err != nil {
				return err
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid <= 0 || syscall.Kill(pid, syscall.SIGTERM) != nil {
				os.Remove(pidPath)
				fmt.Fprintf(r.app.Stdout, "The server (pid %d) was not running.\n", pid)
			} else {
				ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				defer cancel()
				for syscall.Kill(pid, 0) == nil && ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
				}
				os.Remove(pidPath)
				fmt.Fprintf(r.app.Stdout, "Stopped the server (pid %d).\n", pid)
			}
			if nodes {
				n := stopLocalAgents(cfg.DataDir)
				fmt.Fprintf(r.app.Stdout, "Stopped %d local node agent(s).\n", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the server's data folder (default as tide server's)")
	cmd.Flags().BoolVar(&nodes, "nodes", false, "also stop the local nodes' agents and their jobs")
	return cmd
}

// stopLocalAgents kills the agents of the local provider's nodes under
// dataDir (and their jobs: each agent leads its own process group), after
// checking each pid's command line names its node folder.
func stopLocalAgents(dataDir string) int {
	files, _ := filepath.Glob(filepath.Join(dataDir, "locations", "*", "nodes", "*", "node.json"))
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		_, rest, ok := strings.Cut(string(b), `"pid":`)
		if !ok {
			continue
		}
		end := strings.IndexAny(rest, ",}")
		pid, err := strconv.Atoi(strings.TrimSpace(rest[:max(end, 0)]))
		if err != nil || pid <= 0 {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), filepath.Dir(f)) {
			continue
		}
		if syscall.Kill(-pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
