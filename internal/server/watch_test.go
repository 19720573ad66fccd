package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// event is one server-sent event.
type event struct{ name, data string }

// watchRoute follows a GET route as server-sent events and returns its
// events on a channel (closed when the stream ends).
func watchRoute(t *testing.T, in *instance, path, token string) <-chan event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", in.cfg.AdvertiseURL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s as events: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan event, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				ch <- ev
				ev = event{}
			}
		}
	}()
	return ch
}

// next waits for the next event that satisfies ok.
func next(t *testing.T, ch <-chan event, what string, ok func(event) bool) event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if ok(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event for %s in 30 s", what)
		}
	}
}

// A watched route sends its answer now and again when it changes: the
// computes list gains a compute; a compute followed while it is deleted
// ends with a problem event; a job is followed to its end; a stream
// without a token is 401, as its GET would be.
func TestWatchRoutes(t *testing.T) {
	in, _ := newServer(t)
	token := in.srv.AdminToken
	list := watchRoute(t, in, "/v1/workspaces/default/computes", token)
	first := next(t, list, "the first answer", func(ev event) bool { return ev.name == "update" })
	var cs api.List[api.Compute]
	if err := json.Unmarshal([]byte(first.data), &cs); err != nil || len(cs.Value) != 0 {
		t.Fatalf("first answer %q: %v", first.data, err)
	}
	createCompute(t, in, "name: watched\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\n")
	next(t, list, "the new compute listed", func(ev event) bool { return ev.name == "update" && strings.Contains(ev.data, `"name":"watched"`) })

	one := watchRoute(t, in, "/v1/workspaces/default/computes/watched", token)
	next(t, one, "the compute", func(ev event) bool { return ev.name == "update" })
	j := submit(t, in, "command: echo watched\ncompute: azureml:watched\n")
	job := watchRoute(t, in, "/v1/workspaces/default/jobs/"+j.Name, token)
	next(t, job, "the job completed", func(ev event) bool { return ev.name == "update" && strings.Contains(ev.data, `"status":"Completed"`) })
	if err := in.client.DeleteCompute(context.Background(), "default", "watched"); err != nil {
		t.Fatal(err)
	}
	p := next(t, one, "the deleted compute's problem", func(ev event) bool { return ev.name == "problem" })
	if !strings.Contains(p.data, `"status":404`) {
		t.Fatalf("problem for a deleted compute: %s", p.data)
	}
	// The stream ends after the problem.
	select {
	case ev, open := <-one:
		if open {
			t.Fatalf("event after the problem: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after its problem event")
	}

	// Authentication and authorization come first, as for a GET.
	req, _ := http.NewRequest("GET", in.cfg.AdvertiseURL+"/v1/workspaces/default/computes", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("events without a token: %d, want 401", resp.StatusCode)
	}
}
