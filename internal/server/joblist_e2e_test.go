package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestJobListAsStored: the job list sends each job's stored document on
// undecoded, with its etag and queue position added. Every job must read
// exactly as decoding and encoding it gives (what the list sent before),
// and as job show has it (less what only show adds: cost, usage,
// metrics), on both stores: a job that ran (times, exit code, inputs,
// outputs, environment variables) and queued jobs with their positions.
func TestJobListAsStored(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	createCompute(t, in, "name: cpu\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\n")
	createCompute(t, in, "name: paused\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 0\n")
	ran := submit(t, in, `command: echo ${{inputs.greeting}} > ${{outputs.out}}/hi.txt
compute: cpu
display_name: greets
experiment_name: lists
tags: {team: infra}
environment_variables: {MODE: test}
inputs: {greeting: hello}
outputs: {out: {type: uri_folder}}
`)
	if j := waitJob(t, in, ran.Name, 60*time.Second); j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s (%s), want Completed", j.Name, j.Status, j.Error)
	}
	low := submit(t, in, "command: 'true'\ncompute: paused\nqueue_settings: {priority: low}\n")
	first := submit(t, in, "command: 'true'\ncompute: paused\n")
	high := submit(t, in, "command: 'true'\ncompute: paused\nqueue_settings: {priority: high}\n")
	wantPos := map[string]int{high.Name: 1, first.Name: 2, low.Name: 3}
	// The controller writes their pending reason once: list them after.
	for name := range wantPos {
		waitFor(t, "job "+name+"'s pending reason", 10*time.Second, func() bool {
			j, err := in.client.Job(ctx, "default", name)
			return err == nil && strings.Contains(j.PendingReason, "max_instances")
		})
	}

	// Queue positions come from the list itself when it holds every
	// queued job of its computes, else from the store (limit).
	for query, n := range map[string]int{"": 4, "compute=paused": 3, "status=Queued&order=oldest": 3, "compute=paused&limit=2": 2, "compute=cpu": 1, "compute=nowhere": 0} {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+in.cfg.Listen+"/v1/workspaces/default/jobs?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+in.srv.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("job list: %s %s: %s", resp.Status, resp.Header.Get("Content-Type"), body)
		}
		var list struct{ Value []json.RawMessage }
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("job list: %v: %s", err, body)
		}
		if len(list.Value) != n {
			t.Fatalf("job list ?%s: %d jobs, want %d", query, len(list.Value), n)
		}
		for _, raw := range list.Value {
			var j api.Job
			if err := json.Unmarshal(raw, &j); err != nil {
				t.Fatalf("a listed job: %v: %s", err, raw)
			}
			if got, want := asMap(t, raw), asMap(t, mustJSON(t, j)); !reflect.DeepEqual(got, want) {
				t.Errorf("job %s as listed:\n%v\nwant, as decoded and encoded:\n%v", j.Name, got, want)
			}
			if j.QueuePosition != wantPos[j.Name] {
				t.Errorf("job list ?%s: job %s: queue position %d, want %d", query, j.Name, j.QueuePosition, wantPos[j.Name])
			}
			show, err := in.client.Job(ctx, "default", j.Name)
			if err != nil {
				t.Fatal(err)
			}
			show.Cost, show.Usage, show.Metrics = j.Cost, j.Usage, j.Metrics
			if got, want := asMap(t, raw), asMap(t, mustJSON(t, show)); !reflect.DeepEqual(got, want) {
				t.Errorf("job %s as listed:\n%v\nwant, as job show has it:\n%v", j.Name, got, want)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func asMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
