package server_test

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

// nodeTokenRE matches a node token (node.<id>.<HMAC>).
var nodeTokenRE = regexp.MustCompile(`node\.[A-Za-z0-9_.-]+\.[0-9a-f]{64}`)

// TestJobCannotReadTokens (issue 21, defect 14): a job looks where a token
// used to be within its reach (its HOME's CLI configuration, its parent
// agent's environment, every process's environment) and prints what it
// finds; its log must hold neither the admin token nor any node token.
// (Only its own ancestors are searched: other tests' agents may run on the
// machine meanwhile.)
// Before the fix the agent kept its token in its environment, readable in
// /proc/$PPID/environ, and jobs inherited the server's HOME.
func TestJobCannotReadTokens(t *testing.T) {
	runtimes := []string{"process"}
	if _, err := exec.LookPath("bwrap"); err == nil {
		runtimes = append(runtimes, "sandbox")
	}
	root := os.Geteuid() == 0
	if root {
		// A server running as root runs jobs as tide-job by default, as
		// another user with run_as, and as root only with run_as:
		// same-as-agent.
		runtimes = append(runtimes, "process-run-as-nobody", "process-same-as-agent")
	}
	for _, name := range runtimes {
		t.Run(name, func(t *testing.T) {
			rt, runAs := name, ""
			switch name {
			case "process-run-as-nobody":
				rt, runAs = "process", "nobody"
			case "process-same-as-agent":
				rt, runAs = "process", "same-as-agent"
			}
			dir := t.TempDir()
			in := startWith(t, dir, "", "", func(c *config.Server) {
				c.Locations = append(c.Locations, config.Location{Name: "probe", Provider: "local", Runtime: rt, RunAs: runAs,
					Settings: map[string]any{"agent_command": []any{tideBin, "agent"}, "grace_period": "5s", "data_dir": filepath.Join(dir, "probe")}})
			})
			t.Cleanup(func() { cleanup(t, in) })
			createCompute(t, in, "name: probe\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: probe\nmax_instances: 1\n")
			probe := `echo "home=$HOME"
echo "uid=$(id -u)"
head -c 16 ` + filepath.Join(dir, "tide.db") + ` 2>&1
echo
cat ` + filepath.Join(dir, "tls") + `/*.key 2>&1
ls -la ` + dir + ` 2>&1
cat "$HOME/.config/tide/config.json" 2>&1
echo "--- parent"
tr '\0' '\n' < /proc/$PPID/environ 2>&1
echo "--- ancestors"
p=$PPID
while [ "$p" -gt 1 ]; do tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -E 'TOKEN|node[.]'; p=$(awk '{print $4}' "/proc/$p/stat"); done
echo "--- env"
env | sort
echo probe-done`
			j := submit(t, in, "command: |\n"+indentLines(probe, "  ")+"compute: probe\n")
			done := waitJob(t, in, j.Name, 90*time.Second)
			if done.Status != api.JobCompleted {
				t.Fatalf("probe job: %s (%s)", done.Status, done.Error)
			}
			lines, err := in.client.Logs(context.Background(), "default", j.Name, 0)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			for _, l := range lines {
				out.WriteString(l.Text + "\n")
			}
			log := out.String()
			if !strings.Contains(log, "probe-done") {
				t.Fatalf("the probe did not finish:\n%s", log)
			}
			if runAs == "nobody" && !strings.Contains(log, "uid=65534") {
				t.Errorf("a job of run_as: nobody ran as another user:\n%s", log)
			}
			if root && rt == "process" && runAs == "" {
				u, err := user.Lookup("tide-job")
				if err != nil {
					t.Fatalf("the agent ran as root and did not create the user tide-job for its jobs: %v", err)
				}
				if !strings.Contains(log, "uid="+u.Uid+"\n") {
					t.Errorf("a job on a root agent without run_as did not run as tide-job (uid %s):\n%s", u.Uid, log)
				}
			}
			if runAs == "same-as-agent" {
				if !strings.Contains(log, "uid=0\n") {
					t.Errorf("a job of run_as: same-as-agent did not run as the agent's user (root):\n%s", log)
				}
			} else if root && (strings.Contains(log, "SQLite format") || strings.Contains(log, "PRIVATE KEY") || strings.Contains(log, " tide.db\n")) {
				t.Errorf("a job read or listed the server's data folder (database, TLS key):\n%s", log)
			}
			if strings.Contains(log, in.srv.AdminToken) {
				t.Errorf("the job read the admin token:\n%s", log)
			}
			if m := nodeTokenRE.FindString(log); m != "" || strings.Contains(log, "TIDE_AGENT_TOKEN=") {
				t.Errorf("the job read a node token (%s):\n%s", m, log)
			}
			// The job's own environment (not the agent's, which a job of
			// the same user as root may still read; it holds no token).
			_, own, _ := strings.Cut(log, "--- env\n")
			for _, v := range []string{"XDG_CONFIG_HOME=", "TIDE_TEST", "CI=", "MAKEFLAGS="} {
				if strings.Contains(own, v) {
					t.Errorf("the job inherited the server's own setting %s:\n%s", v, own)
				}
			}
		})
	}
}

func indentLines(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}
