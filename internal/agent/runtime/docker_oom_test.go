package runtime

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/dockerengine"
)

// lateOOMEngine is a programmable fake of the Docker engine's API: the real
// engine cannot be made to deliver its "oom" event after the container's
// exit, which it does under load (Docker 20.10 then reports OOMKilled
// false). The fake answers the few calls a job's container makes; its
// container exits 137 with OOMKilled false, and when oom is set the event
// stream says "oom" only after the exit was answered.
func lateOOMEngine(t *testing.T, oom bool) *dockerengine.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /containers/create", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"Id":"0123456789abcdef0123"}`)
	})
	mux.HandleFunc("POST /containers/{id}/start", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /containers/{id}/wait", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"StatusCode":137}`)
		close(exited)
	})
	mux.HandleFunc("GET /containers/{id}/json", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"Id":"0123456789abcdef0123","State":{"OOMKilled":false,"Pid":0}}`)
	})
	mux.HandleFunc("GET /containers/{id}/logs", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("DELETE /containers/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		if f := r.URL.Query().Get("filters"); !strings.Contains(f, `"oom"`) || !strings.Contains(f, "0123456789abcdef0123") {
			t.Errorf("events filters = %s; want the container's oom events", f)
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-exited:
		case <-r.Context().Done():
			return
		}
		if oom {
			time.Sleep(200 * time.Millisecond)
			fmt.Fprint(w, `{"Type":"container","Action":"oom","id":"0123456789abcdef0123"}`+"\n")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return dockerengine.New(sock)
}

// An OOM kill is reported as one even when the engine learns of it only
// after the container's exit; a plain SIGKILL is not.
func TestDockerOOMEventAfterExit(t *testing.T) {
	for _, oom := range []bool{true, false} {
		d := &Docker{Engine: lateOOMEngine(t, oom), Limits: Limits{MemoryBytes: 64 << 20}, OutputDelay: time.Second}
		h, err := d.Start(t.Context(), Spec{Command: "x", Dir: t.TempDir(), Image: "img", Name: "late-oom"})
		if err != nil {
			t.Fatal(err)
		}
		code, err := h.Wait()
		reason := h.(ExitReasoner).ExitReason()
		if err != nil || code != 137 {
			t.Fatalf("oom %v: Wait = %d, %v; want 137", oom, code, err)
		}
		if want := "out of memory (limit 64 MiB)"; oom != strings.HasPrefix(reason, want) {
			t.Errorf("oom event after the exit %v: ExitReason = %q", oom, reason)
		}
	}
}
