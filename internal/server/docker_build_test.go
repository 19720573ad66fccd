package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/dockerengine/dockertest"
)

// TestEnvironmentBuildUploaded: an environment with build: (Azure's
// docker-context shape) is registered with tide environment create, which
// uploads the folder; a job naming it, and a job with an inline build:,
// run on a docker node from the uploaded context, not from a path on the
// submitting machine (the folder is removed before the jobs run).
func TestEnvironmentBuildUploaded(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.Busybox(t, engine)
	in := newDockerServer(t)
	createCompute(t, in, dockerCluster)
	dir := t.TempDir()
	stamp := time.Now().Format("150405.000000000")
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ctx/Dockerfile", "FROM "+image+"\nCOPY hello.txt /etc/hello.txt\n")
	write("ctx/hello.txt", "from the uploaded context "+stamp+"\n")
	write("env.yml", "$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json\nname: built\nbuild:\n  path: ctx\n  dockerfile_path: Dockerfile\n")
	write("registered.yml", "command: cat /etc/hello.txt\ncompute: azureml:dock-cluster\nenvironment: azureml:built@latest\n")
	write("inline.yml", "command: cat /etc/hello.txt\ncompute: azureml:dock-cluster\nenvironment:\n  build:\n    path: ctx\n")
	write("empty/readme.txt", "no Dockerfile here\n")
	write("nodocker.yml", "name: nodocker\nbuild:\n  path: empty\n")
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(tideBin, args...)
		cmd.Env = append(os.Environ(), "TIDE_SERVER="+in.cfg.AdvertiseURL, "TIDE_TOKEN="+in.srv.AdminToken, "XDG_CONFIG_HOME="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := cli("environment", "create", "-f", filepath.Join(dir, "env.yml"))
	if err != nil || !strings.Contains(out, "build:") || !strings.Contains(out, "blob:") {
		t.Fatalf("environment create: %v\n%s", err, out)
	}
	if out, err := cli("environment", "create", "-f", filepath.Join(dir, "nodocker.yml")); err == nil || !strings.Contains(out, "holds no Dockerfile") {
		t.Fatalf("a context without a Dockerfile: %v\n%s", err, out)
	}
	var names []string
	for _, f := range []string{"registered.yml", "inline.yml"} {
		out, err := cli("job", "create", "-f", filepath.Join(dir, f), "-o", "json")
		if err != nil {
			t.Fatalf("job create %s: %v\n%s", f, err, out)
		}
		_, rest, _ := strings.Cut(out, `"name": "`)
		name, _, _ := strings.Cut(rest, `"`)
		names = append(names, name)
	}
	// The nodes build from what was uploaded, not from this folder.
	if err := os.RemoveAll(filepath.Join(dir, "ctx")); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		j := waitJob(t, in, n, 120*time.Second)
		text := logText(t, in, n)
		if j.Status != api.JobCompleted || !strings.Contains(text, "from the uploaded context "+stamp) || !strings.Contains(text, "unpacking the environment's build context") {
			t.Errorf("job %s: %s %s; log:\n%s", n, j.Status, j.Error, text)
		}
		if tag := buildTag(t, in, n); tag != "" {
			defer engine.RemoveImage(context.Background(), tag)
		}
	}
}
