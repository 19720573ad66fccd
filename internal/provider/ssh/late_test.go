package ssh_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/builtin"
	"github.com/tideml/tide/internal/provider/ssh"
	"github.com/tideml/tide/internal/server/servertest"
)

// lateProvider is the ssh provider whose first create answers too late:
// the agent starts on the host, but the create fails as a timeout does.
type lateProvider struct {
	provider.Provider
	mu      sync.Mutex
	late    bool
	created []string // the ids of the creates that answered late
}

func (p *lateProvider) Create(ctx context.Context, req provider.NodeRequest) (*provider.Node, error) {
	n, err := p.Provider.Create(ctx, req)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil || p.late {
		return n, err
	}
	p.late = true
	p.created = append(p.created, req.ID)
	return nil, fmt.Errorf("creating node %s: %w", req.ID, &ssh.UnreachableError{Host: "lab", Err: fmt.Errorf("%w after 10s", context.DeadlineExceeded)})
}

// TestTimedOutCreateLeavesNoNode checks that a create that timed out
// after starting its agent does not leave the node's folder on the host,
// where it would hold the host's only slot: the next create gets it, and
// the job runs.
func TestTimedOutCreateLeavesNoNode(t *testing.T) {
	l := requireLab(t)
	settings := l.settings(l.shared(), 1, "")
	settings["hosts"] = settings["hosts"].([]any)[:1]
	deleteAll(t, settings)
	defer deleteAll(t, settings)
	late := &lateProvider{}
	registry := builtin.Providers()
	registry["ssh-late"] = func(name string, s map[string]any, deps provider.Deps) (provider.Provider, error) {
		p, err := ssh.Factory(name, s, deps)
		late.Provider = p
		return late, err
	}
	opts := servertest.Options{
		DataDir:   t.TempDir(),
		Addr:      l.Hosts[0].RootIP + ":0",
		Location:  config.Location{Name: "lab", Provider: "ssh-late", Settings: settings},
		Configure: func(cfg *config.Server) { cfg.Providers = registry },
	}
	srv := servertest.Start(t, opts)
	defer func() { srv.Shutdown() }()
	srv.PutCompute("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	j := srv.Submit("command: echo ok\ncompute: cpu-cluster\n")
	j = srv.WaitJob(j.Name, 60*time.Second, servertest.Terminal)
	late.mu.Lock()
	created := late.created
	late.mu.Unlock()
	if len(created) != 1 {
		t.Fatalf("late creates %v; want one", created)
	}
	dir := filepath.Join(settings["hosts"].([]any)[0].(map[string]any)["dir"].(string), "nodes", created[0])
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			t.Logf("%s: %.300s", e.Name(), b)
		}
		t.Errorf("the folder of node %s, whose create timed out, is still on the host (stat: %v)", created[0], err)
	}
	if j.Status != api.JobCompleted {
		t.Errorf("job on the host whose only slot a timed-out create took: %s %s; want Completed", j.Status, j.Error)
	}
	srv.DeleteCompute("cpu-cluster", 60*time.Second)
}
