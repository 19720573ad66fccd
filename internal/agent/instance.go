package agent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tideml/tide/api"
)

// instanceAgent is what an agent does on a compute instance's node: run
// its setup scripts, run Jupyter, and measure activity for idle shutdown.
type instanceAgent struct {
	a     *agent
	setup *api.InstanceSetup

	mu      sync.Mutex
	jupyter api.JupyterServer
}

// startInstance begins the instance's work once per agent process: a
// re-registration after a reconnect does not run the scripts again.
func (a *agent) startInstance(ctx context.Context, su *api.InstanceSetup) {
	a.instanceOnce.Do(func() {
		ia := &instanceAgent{a: a, setup: su}
		a.inst.Store(ia)
		a.wg.Go(func() { ia.run(ctx) })
	})
}

func (ia *instanceAgent) run(ctx context.Context) {
	// Say at once why Jupyter is not there yet: heartbeats report it
	// while the setup scripts run.
	if _, err := exec.LookPath("jupyter-notebook"); err != nil {
		ia.setJupyter(api.JupyterServer{Reason: jupyterMissing})
	} else {
		ia.setJupyter(api.JupyterServer{Reason: "Jupyter starts once the setup scripts have run"})
	}
	// The creation script runs once per disk: a marker in the node folder
	// (kept across stop and start) says it succeeded.
	marker := filepath.Join(ia.a.cfg.Dir, ".tide", "creation-script.done")
	if s := ia.setup.CreationScript; s != nil {
		if _, err := os.Stat(marker); err != nil {
			if !ia.script(ctx, "creation_script", s) {
				return
			}
			_ = os.WriteFile(marker, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
		}
	}
	if s := ia.setup.StartupScript; s != nil && !ia.script(ctx, "startup_script", s) {
		return
	}
	ia.runJupyter(ctx)
}

// script runs one setup script in the node folder and reports it; it
// reports whether it succeeded.
func (ia *instanceAgent) script(ctx context.Context, name string, s *api.SetupScript) bool {
	dir := filepath.Join(ia.a.cfg.Dir, ".tide", "setup")
	_ = os.MkdirAll(dir, 0o755)
	args := []string{"-c", s.Command}
	if s.Command == "" {
		file := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(file, []byte(s.Content), 0o755); err != nil {
			ia.report(ctx, api.SetupReport{Script: name, Status: "Failed", Error: err.Error()})
			return false
		}
		args = []string{file}
	}
	timeout := time.Duration(s.TimeoutMinutes) * time.Minute
	if timeout <= 0 {
		timeout = 60 * time.Minute
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(sctx, "bash", args...)
	cmd.Dir = ia.a.cfg.Dir
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	ia.report(ctx, api.SetupReport{Script: name, Status: "Running"})
	err := cmd.Run()
	_ = os.WriteFile(filepath.Join(dir, name+".log"), out.Bytes(), 0o644)
	rep := api.SetupReport{Script: name, Status: "Succeeded", Log: out.String()}
	if err != nil {
		rep.Status, rep.Error = "Failed", err.Error()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code := ee.ExitCode()
			rep.ExitCode = &code
		}
		if sctx.Err() == context.DeadlineExceeded {
			rep.Error = fmt.Sprintf("timed out after %s (timeout_minutes)", timeout)
		}
	}
	ia.report(ctx, rep)
	return err == nil
}

func (ia *instanceAgent) report(ctx context.Context, rep api.SetupReport) {
	err := ia.a.retry(ctx, "reporting "+rep.Script, func(rctx context.Context) error {
		return ia.a.client.postJSON(rctx, "/v1/agent/setup", rep, nil)
	})
	if err != nil {
		ia.a.log.WarnContext(ctx, "setup report lost", slog.String("script", rep.Script), slog.Any("error", err))
	}
}

// jupyterClient asks the node's own Jupyter for its status and kernels.
// It never goes through HTTP_PROXY: Jupyter listens on the node's own
// address, which need not be a loopback one (those Go never proxies), and
// a proxy's answer would be taken for Jupyter's.
var jupyterClient = &http.Client{Transport: &http.Transport{Proxy: nil}}

const jupyterMissing = "jupyter-notebook is not installed on the node (Debian: apt-get install jupyter-notebook)"

// jupyterPort picks the port Jupyter is told to use on host (a variable
// for the test that takes it first).
var jupyterPort = freePort

// runJupyter runs Debian's jupyter-notebook on a free port of the node's
// address, serving the node folder under the path the server proxies,
// until ctx ends. Without it the application is reported unavailable.
// The port is free when chosen, but another program may bind it before
// Jupyter does: Jupyter then exits without answering (or another server
// answers there), and it is started again on another port.
func (ia *instanceAgent) runJupyter(ctx context.Context) {
	bin, err := exec.LookPath("jupyter-notebook")
	if err != nil {
		ia.setJupyter(api.JupyterServer{Reason: jupyterMissing})
		return
	}
	logf, err := os.OpenFile(filepath.Join(ia.a.cfg.Dir, "jupyter.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		ia.setJupyter(api.JupyterServer{Reason: err.Error()})
		return
	}
	defer logf.Close()
	host := cmp.Or(ia.a.cfg.Address, "127.0.0.1")
	for attempt := 1; ; attempt++ {
		port, err := jupyterPort(host)
		if err != nil {
			ia.setJupyter(api.JupyterServer{Reason: "no free port: " + err.Error()})
			return
		}
		j, exited, err := ia.startJupyter(ctx, bin, logf, host, port)
		if err != nil {
			ia.setJupyter(api.JupyterServer{Reason: "starting jupyter-notebook: " + err.Error()})
			return
		}
		if j.Port != 0 {
			ia.setJupyter(j)
			ia.jupyterExited(ctx, <-exited)
			return
		}
		err = <-exited
		if ctx.Err() != nil || attempt == 3 {
			ia.jupyterExited(ctx, err)
			return
		}
		ia.a.log.Info("jupyter did not answer on its port; starting it on another",
			slog.Int("port", port), slog.Any("exit", err))
	}
}

// startJupyter starts jupyter-notebook on host:port and waits until it
// answers there with the token it was given. It returns the server
// (Port 0 when Jupyter exited first, or when another server answered: it
// is then stopped) and the channel that gets the process's exit.
func (ia *instanceAgent) startJupyter(ctx context.Context, bin string, logf *os.File, host string, port int) (api.JupyterServer, <-chan error, error) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	args := []string{"--no-browser", "--ip=" + host, "--port=" + strconv.Itoa(port), "--port-retries=0",
		"--notebook-dir=" + ia.a.cfg.Dir, "--NotebookApp.base_url=" + ia.setup.JupyterBaseURL,
		// The server proxies with its own credentials and removes Origin.
		"--NotebookApp.allow_origin=*"}
	if os.Geteuid() == 0 {
		// Jupyter refuses root unless told: the agent (and so its user's
		// shell and jobs) runs as root on this node already.
		args = append(args, "--allow-root")
	}
	jctx, stop := context.WithCancel(ctx)
	cmd := exec.CommandContext(jctx, bin, args...)
	cmd.Dir = ia.a.cfg.Dir
	// The token goes through the environment, not argv (readable by all).
	cmd.Env = append(os.Environ(), "JUPYTER_TOKEN="+token, "HOME="+ia.a.cfg.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		stop()
		return api.JupyterServer{}, nil, err
	}
	ia.setJupyter(api.JupyterServer{Reason: "Jupyter is starting"})
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); stop() }()
	// Listed as available only once it answers, and only Jupyter knows
	// the token: a server that took the port first does not.
	status := fmt.Sprintf("http://%s%sapi/status", net.JoinHostPort(host, strconv.Itoa(port)), ia.setup.JupyterBaseURL)
	for {
		select {
		case err := <-exited:
			exited <- err
			return api.JupyterServer{}, exited, nil
		case <-time.After(200 * time.Millisecond):
		}
		switch code := jupyterStatus(ctx, status, token); {
		case code == http.StatusOK:
			return api.JupyterServer{Port: port, Token: token}, exited, nil
		case code != 0 && code != http.StatusServiceUnavailable:
			// Another server answers on Jupyter's port: Jupyter
			// cannot have it.
			stop()
			return api.JupyterServer{}, exited, nil
		}
	}
}

// jupyterStatus asks Jupyter's status with the token; 0 when nothing
// answered.
func jupyterStatus(ctx context.Context, url, token string) int {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := jupyterClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (ia *instanceAgent) jupyterExited(ctx context.Context, err error) {
	if ctx.Err() == nil {
		ia.setJupyter(api.JupyterServer{Reason: fmt.Sprintf("jupyter-notebook exited (%v); see %s", err, filepath.Join(ia.a.cfg.Dir, "jupyter.log"))})
	}
}

func (ia *instanceAgent) setJupyter(j api.JupyterServer) {
	ia.mu.Lock()
	ia.jupyter = j
	ia.mu.Unlock()
	if j.Reason != "" {
		ia.a.log.Info("jupyter unavailable", slog.String("reason", j.Reason))
	}
}

// freePort returns a port free on host now.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// activity measures what keeps the instance busy, for the heartbeat: the
// CPU the node's processes used (the heartbeat's node utilization: the
// agent, Jupyter, kernels, shells and jobs) and Jupyter's kernels.
func (ia *instanceAgent) activity(ctx context.Context, node *api.NodeUtilization) *api.NodeActivity {
	act := &api.NodeActivity{SSHSessions: ia.a.ssh.report()}
	if node != nil {
		act.CPUPercent = node.CPUPercent
	}
	ia.mu.Lock()
	j := ia.jupyter
	ia.mu.Unlock()
	act.Jupyter = &j
	if j.Port != 0 {
		ia.kernels(ctx, j, act)
	}
	return act
}

// kernels reads Jupyter's kernel list: each kernel's execution state and
// open connections.
func (ia *instanceAgent) kernels(ctx context.Context, j api.JupyterServer, act *api.NodeActivity) {
	kctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	// On the address Jupyter listens on (127.0.0.1 reaches only a loopback one).
	addr := net.JoinHostPort(cmp.Or(ia.a.cfg.Address, "127.0.0.1"), strconv.Itoa(j.Port))
	url := fmt.Sprintf("http://%s%sapi/kernels", addr, ia.setup.JupyterBaseURL)
	req, err := http.NewRequestWithContext(kctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "token "+j.Token)
	resp, err := jupyterClient.Do(req)
	if err != nil {
		return // starting: no kernels yet
	}
	defer resp.Body.Close()
	var ks []struct {
		ExecutionState string `json:"execution_state"`
		Connections    int    `json:"connections"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&ks) != nil {
		return
	}
	act.Kernels = len(ks)
	for _, k := range ks {
		if k.ExecutionState == "busy" {
			act.KernelsBusy++
		}
		act.Connections += k.Connections
	}
}
