package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/internal/dockerengine"
	"github.com/tideml/tide/internal/dockerengine/dockertest"
)

// syncBuffer is a bytes.Buffer safe for the two output streams.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runToEnd stops h once the command printed "up" (past its traps) when
// stop is set, waits for it, and checks its exit code and reason.
func runToEnd(t *testing.T, h Handle, stop bool, out *syncBuffer, wantCode int, wantReason string) {
	t.Helper()
	if stop {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), "up") && time.Now().Before(deadline) {
			<-time.After(10 * time.Millisecond)
		}
		h.Stop(time.Second)
	}
	code, err := h.Wait()
	if err != nil || code != wantCode {
		t.Fatalf("Wait = %d, %v; want %d (output %q)", code, err, wantCode, out.String())
	}
	reason := h.(ExitReasoner).ExitReason()
	if !strings.HasPrefix(reason, wantReason) || (wantReason == "") != (reason == "") {
		t.Errorf("ExitReason = %q, want prefix %q", reason, wantReason)
	}
}

func TestDocker(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.Busybox(t, engine)
	tests := []struct {
		name    string
		command string
		limits  Limits
		shm     int64
		stop    bool
		code    int
		out     string // stdout
		errOut  string // stderr; "*": not checked (the shell may or may not live to say "Killed")
		reason  string
	}{
		{name: "exit code and streams", command: "echo out; echo err >&2; exit 3", code: 3, out: "out\n", errOut: "err\n"},
		{name: "job folder is the working dir", command: "pwd > where; echo $JOBVAR; cat where | wc -l", code: 0, out: "from-job\n1\n"},
		{name: "shm size", command: "df -m /dev/shm | tail -n 1 | tr -s ' ' | cut -d' ' -f2", shm: 48 << 20, out: "48\n"},
		{name: "stop", command: "echo up; sleep 300", stop: true, code: 143, out: "up\n"},
		{name: "memory limit", command: "head -c 300000000 /dev/zero | tail", limits: Limits{MemoryBytes: 32 << 20}, code: 137,
			errOut: "*", reason: "out of memory (limit 32 MiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var out, errOut syncBuffer
			d := &Docker{Engine: engine, Limits: tt.limits, OutputDelay: time.Second}
			spec := Spec{Command: tt.command, Dir: dir, Env: []string{"JOBVAR=from-job"}, Image: image,
				ShmSize: tt.shm, Stdout: &out, Stderr: &errOut, Name: "rt-test-" + strings.ReplaceAll(tt.name, " ", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
			if err := d.Prepare(t.Context(), &spec); err != nil {
				t.Fatal(err)
			}
			h, err := d.Start(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			runToEnd(t, h, tt.stop, &out, tt.code, tt.reason)
			if tt.out != "" && out.String() != tt.out || tt.errOut != "*" && errOut.String() != tt.errOut {
				t.Errorf("stdout %q, stderr %q; want %q, %q", out.String(), errOut.String(), tt.out, tt.errOut)
			}
			if _, err := engine.InspectContainer(t.Context(), "tide-"+spec.Name); !dockerengine.IsNotFound(err) {
				t.Errorf("container left behind after Wait (inspect: %v)", err)
			}
		})
	}
}

func TestDockerImages(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.Busybox(t, engine)
	d := &Docker{Engine: engine}

	t.Run("missing image fails with the engine's message", func(t *testing.T) {
		spec := Spec{Image: "tide-test/no-such-image:1"}
		err := d.Prepare(t.Context(), &spec)
		if err == nil || !strings.Contains(err.Error(), "tide-test/no-such-image:1") || !strings.Contains(err.Error(), "docker engine:") {
			t.Fatalf("Prepare = %v; want the image named and the engine's message", err)
		}
	})

	t.Run("build context is built once per content", func(t *testing.T) {
		ctxDir := t.TempDir()
		// The content is unique per run so the first build really builds.
		stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
		df := "FROM " + image + "\nRUN echo built-" + stamp + " > /built\n"
		if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644); err != nil {
			t.Fatal(err)
		}
		var notes []string
		spec := Spec{BuildDir: ctxDir, Note: func(s string) { notes = append(notes, s) }}
		if err := d.Prepare(t.Context(), &spec); err != nil {
			t.Fatalf("Prepare: %v (notes %q)", err, notes)
		}
		t.Cleanup(func() { _ = engine.RemoveImage(t.Context(), spec.Image) })
		if !strings.HasPrefix(spec.Image, buildTagPrefix) || !strings.Contains(notes[0], "building image") {
			t.Fatalf("image %q, notes %q; want a build", spec.Image, notes)
		}
		var out syncBuffer
		spec.Command, spec.Dir, spec.Stdout, spec.Stderr = "cat /built", t.TempDir(), &out, &out
		h, err := d.Start(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if code, err := h.Wait(); code != 0 || err != nil || out.String() != "built-"+stamp+"\n" {
			t.Fatalf("Wait = %d, %v, output %q", code, err, out.String())
		}
		again := Spec{BuildDir: ctxDir, Note: func(s string) { notes = append(notes, s) }}
		notes = nil
		if err := d.Prepare(t.Context(), &again); err != nil || again.Image != spec.Image || !strings.Contains(notes[0], "built earlier") {
			t.Fatalf("second Prepare: %v, image %q, notes %q; want the cached image", err, again.Image, notes)
		}
	})

	t.Run("failed build reports the engine's message", func(t *testing.T) {
		ctxDir := t.TempDir()
		df := "FROM " + image + "\nRUN echo nope-" + filepath.Base(ctxDir) + " && exit 7\n"
		if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644); err != nil {
			t.Fatal(err)
		}
		spec := Spec{BuildDir: ctxDir}
		err := d.Prepare(t.Context(), &spec)
		if err == nil || !strings.Contains(err.Error(), "returned a non-zero code: 7") {
			t.Fatalf("Prepare = %v; want the build's failure", err)
		}
	})
}

// TestDockerNewRemovesLeftovers: a restarted agent's runtime removes the
// containers an earlier run of the same node left behind.
func TestDockerNewRemovesLeftovers(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.Busybox(t, engine)
	opts := Options{NodeID: "leftover-node", NodeDir: t.TempDir()}
	rt, err := New(t.Context(), DockerName, opts)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	spec := Spec{Command: "sleep 300", Dir: t.TempDir(), Image: image, Stdout: &out, Stderr: &out, Name: "leftover-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	if _, err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.Context(), DockerName, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.InspectContainer(t.Context(), "tide-"+spec.Name); !dockerengine.IsNotFound(err) {
		t.Fatalf("the earlier run's container is still there (inspect: %v)", err)
	}
}

func TestDockerNetwork(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.Busybox(t, engine)
	if _, err := New(t.Context(), DockerName, Options{Network: "tide-test-no-such-network"}); err == nil ||
		!strings.Contains(err.Error(), `network_settings.vnet_name "tide-test-no-such-network"`) {
		t.Fatalf("New with an unknown network = %v; want it named", err)
	}
	rt, err := New(t.Context(), DockerName, Options{Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	h, err := rt.Start(t.Context(), Spec{Command: "tail -n +3 /proc/net/dev | wc -l", Dir: t.TempDir(), Image: image, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := h.Wait(); code != 0 || err != nil || strings.TrimSpace(out.String()) != "1" {
		t.Fatalf("Wait = %d, %v; interfaces %q, want only lo", code, err, out.String())
	}
}
