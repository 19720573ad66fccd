package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestJupyterTakesAnotherPort: the port chosen for Jupyter is taken
// before Jupyter binds it, by a server that answers (404) or by a
// listener that never does. Jupyter exits, or the answer is not
// Jupyter's; either way it is started again on another port, and only a
// Jupyter that accepts its own token is listed.
func TestJupyterTakesAnotherPort(t *testing.T) {
	if _, err := exec.LookPath("jupyter-notebook"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("jupyter-notebook is missing; .ci/run installs it")
		}
		t.Skip("jupyter-notebook is not installed")
	}
	for _, tt := range []struct {
		name  string
		serve func(net.Listener)
	}{
		{"a server answers there", func(ln net.Listener) {
			http.Serve(ln, http.NotFoundHandler())
		}},
		{"a listener that never answers", func(net.Listener) {}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			go tt.serve(taken)
			var asked int
			jupyterPort = func(host string) (int, error) {
				asked++
				if asked == 1 {
					return taken.Addr().(*net.TCPAddr).Port, nil
				}
				return freePort(host)
			}
			defer func() { jupyterPort = freePort }()

			ctx, cancel := context.WithCancel(context.Background())
			a := &agent{cfg: Config{Dir: t.TempDir(), NodeID: "n1"}, log: slog.New(slog.DiscardHandler)}
			ia := &instanceAgent{a: a, setup: &api.InstanceSetup{JupyterBaseURL: "/jupyter/"}}
			done := make(chan struct{})
			go func() { ia.runJupyter(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			var j api.JupyterServer
			deadline := time.Now().Add(120 * time.Second)
			for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				ia.mu.Lock()
				j = ia.jupyter
				ia.mu.Unlock()
				if j.Port != 0 || (j.Reason != "" && j.Reason != "Jupyter is starting") {
					break
				}
			}
			if j.Port == 0 {
				log, _ := os.ReadFile(a.cfg.Dir + "/jupyter.log")
				t.Fatalf("Jupyter not listed: %+v\n%s", j, log)
			}
			if j.Port == taken.Addr().(*net.TCPAddr).Port || asked != 2 {
				t.Fatalf("Jupyter listed on port %d after %d ports asked; the taken one is %s", j.Port, asked, taken.Addr())
			}
			if code := jupyterStatus(ctx, fmt.Sprintf("http://127.0.0.1:%d/jupyter/api/status", j.Port), j.Token); code != 200 {
				t.Fatalf("Jupyter's status with its token: %d", code)
			}
		})
	}
}
