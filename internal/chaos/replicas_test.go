package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/tidetest"
)

// TestReplicasFailover streams jobs through 8 nodes of two `tide server`
// replicas on one PostgreSQL and, at fixed points of the stream, kills
// the leading replica with SIGKILL (the other takes over; the killed one
// comes back as a standby) or restarts PostgreSQL (pg_ctl stop -m
// immediate, 2 s down, start). Each job appends its name to a file. Every
// job must end exactly once, Completed, its line in the file exactly once;
// after the compute's deletion no agent or job process is left.
func TestReplicasFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, two servers, agents and jobs")
	}
	jobs := jobCount(24, 1000)
	every := scale(12, 50) // jobs submitted between two faults
	pg := pgtest.NewCluster(t)
	storeURL := pg.Database(t)
	shared := t.TempDir()
	addrs := []string{freeAddr(t), freeAddr(t)}
	data, clientConfig := filepath.Join(shared, "data"), filepath.Join(shared, "client.json")
	replicas := make([]*server, 2)
	for i, name := range []string{"a", "b"} {
		replicas[i] = newServer(t, options{store: storeURL, data: data, replica: name, addr: addrs[i], agentAddrs: addrs, clientConfig: clientConfig})
		if i == 0 {
			waitFor(t, "replica a to lead", 30*time.Second, func() bool { r, ok := readiness(addrs[0]); return ok && r.Leading })
		}
	}
	effectsFile := tidetest.JobWritable(t, filepath.Join(shared, "effects"))
	replicas[1].createCompute("name: replicated\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 8\nmax_instances: 8\nidle_time_before_scale_down: 600\n")
	start := time.Now()

	leaderKills, pgRestarts := 0, 0
	names := make([]string, jobs)
	for i := range jobs {
		names[i] = fmt.Sprintf("ha-%04d", i)
		// Through either replica, whichever answers: one may be down.
		j, err := spec.ParseJob("job.yml", []byte(fmt.Sprintf("name: %s\ncompute: replicated\ncommand: echo $TIDE_JOB_NAME >> %s; sleep 0.2\n", names[i], effectsFile)), nil)
		if err != nil {
			t.Fatal(err)
		}
		try := 0
		retrying(t, "submitting "+names[i], func() error {
			try++
			_, err := replicas[(i+try)%2].client.CreateJob(context.Background(), "default", j)
			if api.ProblemCode(err) == api.CodeConflict {
				return nil // an earlier try was stored before its answer was lost
			}
			return err
		})
		if i%every != every/2 {
			continue
		}
		if (i/every)%2 == 0 {
			// Kill the leader; the standby takes over; the killed one
			// comes back as a standby.
			lead, other := replicas[0], replicas[1]
			if r, ok := readiness(other.addr); ok && r.Leading {
				lead, other = other, lead
			}
			lead.kill()
			leaderKills++
			waitFor(t, "the standby to take over", 60*time.Second, func() bool { r, ok := readiness(other.addr); return ok && r.Leading })
			lead.start()
		} else {
			pg.Restart(t, 2*time.Second)
			pgRestarts++
			waitFor(t, "a leader after the database restart", 60*time.Second, func() bool {
				r, ok := readiness(addrs[0])
				return ok && r.Leader != ""
			})
		}
	}
	deadline := time.Now().Add(time.Duration(scale(180, 1800)) * time.Second)
	for _, n := range names {
		replicas[0].ended(n, deadline)
	}
	took := time.Since(start)
	lost, dup := replicas[0].exactlyOnce(names, effectsFile, deadline)
	replicas[1].deleteCompute("replicated")
	for _, r := range replicas {
		r.stop()
	}
	waitFor(t, "no agent or job process left", 30*time.Second, func() bool { return len(orphans(data)) == 0 })
	record(row{scenario: fmt.Sprintf("2 replicas: %d leader kills, %d PG restarts", leaderKills, pgRestarts),
		jobs: jobs, kills: leaderKills + pgRestarts, lost: lost, duplicated: dup, took: took.Round(time.Second).String()})
}

// ready is a replica's /readyz answer.
type ready struct {
	Leader  string `json:"leader"`
	Leading bool   `json:"leading"`
}

// readiness asks addr's /readyz; ok is false unless it answers 200.
func readiness(addr string) (ready, bool) {
	var r ready
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return r, false
	}
	defer resp.Body.Close()
	return r, resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&r) == nil
}
