package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tideml/tide/api"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startAgent runs an agent against srv until the test ends.
func startAgent(t *testing.T, srv *fakeServer, dir string) {
	t.Helper()
	startAgentWith(t, srv, dir, 0)
}

// startAgentWith is startAgent with Config.RunningWait (0: the default).
func startAgentWith(t *testing.T, srv *fakeServer, dir string, runningWait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			RunningWait:       runningWait,
			ServerURLs:        []string{srv.srv.URL},
			NodeID:            "node-1",
			Token:             srv.token,
			Dir:               dir,
			Capacity:          api.Capacity{VCPUs: 4, MemoryGB: 14, Note: "logical: host has 2 cores"},
			HeartbeatInterval: 100 * time.Millisecond,
			MinBackoff:        20 * time.Millisecond,
			MaxBackoff:        100 * time.Millisecond,
			ShutdownTimeout:   time.Second,
			Logger:            slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	waitFor(t, 5*time.Second, "the agent to open its stream", func() bool {
		_, _, _, streams := srv.snapshot()
		return streams > 0
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func assignment(job, command string) api.Assignment {
	return api.Assignment{
		ID: "ws1/" + job + "/1", Workspace: "ws1", Job: job, Attempt: 1, NodeCount: 1, Command: command,
	}
}

// checkDense checks that lines are numbered 1..n without a gap.
func checkDense(t *testing.T, lines []api.LogLine, last int64) {
	t.Helper()
	for i, l := range lines {
		if l.NodeSeq != int64(i+1) {
			t.Fatalf("line %d has NodeSeq %d; want dense numbering from 1", i, l.NodeSeq)
		}
	}
	if int64(len(lines)) != last {
		t.Fatalf("got %d lines, LastNodeSeq %d", len(lines), last)
	}
}

func texts(lines []api.LogLine, stream string) []string {
	var out []string
	for _, l := range lines {
		if stream == "" || l.Stream == stream {
			out = append(out, l.Text)
		}
	}
	return out
}

func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		files[h.Name] = string(c)
	}
}

func TestAssignmentCompletes(t *testing.T) {
	srv := newFakeServer(t)
	dir := t.TempDir()
	t.Setenv(TokenEnv, "must-not-leak")
	startAgent(t, srv, dir)

	hellos, _, _, _ := srv.snapshot()
	if hellos[0].NodeID != "node-1" || hellos[0].Capacity.VCPUs != 4 || hellos[0].Capacity.Note == "" {
		t.Fatalf("hello = %+v", hellos[0])
	}

	as := assignment("job-a", `echo "lr=${{inputs.lr}}"; echo oops >&2; `+
		`echo model > ${{outputs.model}}/weights.txt; echo ckpt > $TIDE_CHECKPOINT_DIR/c; `+
		`echo "run=$AZUREML_RUN_ID job=$TIDE_JOB_NAME rank=$NODE_RANK count=$AZUREML_NODE_COUNT attempt=$TIDE_ATTEMPT user=$MY_VAR token=${TIDE_AGENT_TOKEN:-none}"; `+
		`echo log > logs/extra.txt; printf 'no newline'`)
	as.Inputs = map[string]string{"lr": "0.01"}
	as.Outputs = []string{"model", "empty"}
	as.Env = map[string]string{"MY_VAR": "hello"}
	as.Notes = []string{"note: environment.image is ignored by the process runtime"}
	srv.push("assign", as)

	waitFor(t, 10*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
	st, _ := srv.final(as.ID)
	if st.Status != api.JobCompleted || st.ExitCode == nil || *st.ExitCode != 0 || st.Error != "" {
		t.Fatalf("final status = %+v", st)
	}
	srv.mu.Lock()
	first := srv.statuses[as.ID][0]
	srv.mu.Unlock()
	if first.Status != api.JobRunning && !first.Started {
		t.Errorf("first status = %s, not Started; want Running, or a final status that says it started", first.Status)
	}
	lines := srv.lines(as.ID)
	checkDense(t, lines, st.LastNodeSeq)
	if lines[0].Text != as.Notes[0] {
		t.Errorf("first line = %q, want the note", lines[0].Text)
	}
	want := []string{"lr=0.01", "run=job-a job=job-a rank=0 count=1 attempt=1 user=hello token=none", "no newline"}
	if got := texts(lines, "stdout"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got := texts(lines, "stderr"); len(got) != 1 || got[0] != "oops" {
		t.Errorf("stderr = %q", got)
	}
	for _, l := range lines {
		if l.Attempt != 1 || l.Node != 0 || l.Time.IsZero() {
			t.Errorf("line %+v: want attempt 1, node 0, a time", l)
		}
	}

	srv.mu.Lock()
	art := srv.artifacts[as.ID]
	srv.mu.Unlock()
	files := untar(t, art)
	if files["outputs/model/weights.txt"] != "model\n" {
		t.Errorf("artifact outputs/model/weights.txt = %q; files %v", files["outputs/model/weights.txt"], keys(files))
	}
	if _, ok := files["outputs/empty/"]; !ok {
		t.Errorf("artifact has no outputs/empty/ folder; files %v", keys(files))
	}
	if files["logs/extra.txt"] != "log\n" || !strings.Contains(files["logs/std_log.txt"], "lr=0.01") {
		t.Errorf("logs in artifact: %v", keys(files))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "checkpoints/ws1/job-a/c")); err != nil || string(b) != "ckpt\n" {
		t.Errorf("checkpoint file: %q, %v", b, err)
	}
	waitFor(t, 5*time.Second, "the state file to be emptied", func() bool {
		return stateFilesEmpty(t, dir)
	})
	// Pushed again (a server that lost the final status): not run twice.
	srv.mu.Lock()
	reports := len(srv.statuses[as.ID])
	srv.mu.Unlock()
	srv.push("assign", as)
	next := assignment("job-b", "true")
	srv.push("assign", next)
	waitFor(t, 10*time.Second, "the next job", func() bool { _, ok := srv.final(next.ID); return ok })
	srv.mu.Lock()
	if n := len(srv.statuses[as.ID]); n != reports {
		t.Errorf("a finished assignment pushed again was run again (%d reports, had %d)", n, reports)
	}
	srv.mu.Unlock()
	waitFor(t, 5*time.Second, "heartbeats", func() bool {
		_, hb, _, _ := srv.snapshot()
		return hb > 0
	})
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestAssignmentEnds(t *testing.T) {
	tests := []struct {
		name      string
		command   string
		timeout   int
		cancel    bool
		status    string
		exitCode  int
		wantError string
	}{
		{name: "exit 0", command: "true", status: api.JobCompleted},
		{name: "exit 3", command: "echo bye; exit 3", status: api.JobFailed, exitCode: 3, wantError: "exit code 3"},
		{name: "killed by a signal", command: "kill -9 $$", status: api.JobFailed, exitCode: 137, wantError: "exit code 137"},
		{name: "unknown input", command: "echo ${{inputs.nope}}", status: api.JobFailed, exitCode: -1,
			wantError: "command: ${{inputs.nope}} is not an input of the job; declare it under inputs"},
		{name: "timeout", command: "echo start; sleep 30", timeout: 1, status: api.JobFailed, exitCode: 143,
			wantError: "timeout: ran longer than limits.timeout 1s"},
		{name: "timeout ignoring SIGTERM", command: "trap '' TERM; echo start; sleep 30", timeout: 1, status: api.JobFailed,
			exitCode: 137, wantError: "timeout: ran longer than limits.timeout 1s"},
		{name: "cancel", command: "echo start; sleep 30", cancel: true, status: api.JobCanceled, exitCode: 143,
			wantError: "canceled by the user"},
	}
	srv := newFakeServer(t)
	startAgent(t, srv, t.TempDir())
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as := assignment("job-"+string(rune('a'+i)), tt.command)
			as.TimeoutSeconds = tt.timeout
			as.GraceSeconds = 1
			srv.push("assign", as)
			if tt.cancel {
				waitFor(t, 10*time.Second, "the job's first line", func() bool { return len(srv.lines(as.ID)) > 0 })
				srv.push("cancel", api.Cancel{ID: as.ID, Reason: "canceled by the user", GraceSeconds: 1})
			}
			waitFor(t, 15*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
			st, _ := srv.final(as.ID)
			code := -1
			if st.ExitCode != nil {
				code = *st.ExitCode
			}
			if st.Status != tt.status || code != tt.exitCode || st.Error != tt.wantError {
				t.Fatalf("final = %s exit %d %q; want %s exit %d %q", st.Status, code, st.Error, tt.status, tt.exitCode, tt.wantError)
			}
			checkDense(t, srv.lines(as.ID), st.LastNodeSeq)
			srv.mu.Lock()
			_, hasArtifacts := srv.artifacts[as.ID]
			srv.mu.Unlock()
			if !hasArtifacts && !slices.Contains(st.EmptyArtifacts, "logs/std_log.txt") {
				t.Errorf("no artifacts uploaded, and none reported empty (%q)", st.EmptyArtifacts)
			}
		})
	}
}

func TestManyLinesAreBatched(t *testing.T) {
	srv := newFakeServer(t)
	startAgent(t, srv, t.TempDir())
	as := assignment("chatty", `i=1; while [ $i -le 5000 ]; do echo "line $i"; i=$((i+1)); done`)
	srv.push("assign", as)
	waitFor(t, 20*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
	st, _ := srv.final(as.ID)
	lines := srv.lines(as.ID)
	checkDense(t, lines, st.LastNodeSeq)
	if len(lines) != 5000 || lines[4999].Text != "line 5000" {
		t.Fatalf("got %d lines, last %q", len(lines), lines[len(lines)-1].Text)
	}
}

// TestServerRestart drops the stream and answers 503 for a while, as a
// restarting server would: the job keeps running, the agent re-registers
// reporting it, and every log line arrives once the server is back.
func TestServerRestart(t *testing.T) {
	srv := newFakeServer(t)
	dir := t.TempDir()
	startAgent(t, srv, dir)
	as := assignment("long", `echo before; while [ ! -f go1 ]; do sleep 0.02; done; echo middle; `+
		`while [ ! -f release ]; do sleep 0.02; done; echo after`)
	srv.push("assign", as)
	waitFor(t, 10*time.Second, "the first line", func() bool { return len(srv.lines(as.ID)) > 0 })
	jobDir := filepath.Join(dir, "jobs/ws1/long/1")

	srv.setDown(true)
	waitFor(t, 10*time.Second, "the agent to hit the unavailable server", func() bool {
		_, _, refused, _ := srv.snapshot()
		return refused >= 3
	})
	// The job goes on while the server is away; its lines wait in the agent.
	if err := os.WriteFile(filepath.Join(jobDir, "go1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the job's second line", func() bool {
		b, _ := os.ReadFile(filepath.Join(jobDir, "logs/std_log.txt"))
		return strings.Contains(string(b), "middle")
	})
	hellosBefore, _, _, _ := srv.snapshot()
	srv.setDown(false)
	waitFor(t, 10*time.Second, "re-registration and a new stream", func() bool {
		hellos, _, _, streams := srv.snapshot()
		return len(hellos) > len(hellosBefore) && streams >= 2
	})
	hellos, _, _, _ := srv.snapshot()
	again := hellos[len(hellosBefore)]
	if len(again.Running) != 1 || again.Running[0].ID != as.ID || again.Running[0].Status != api.JobRunning {
		t.Errorf("re-registration reports %+v; want the running assignment", again.Running)
	}
	waitFor(t, 10*time.Second, "the kept line to be resent", func() bool { return len(srv.lines(as.ID)) == 2 })

	if err := os.WriteFile(filepath.Join(jobDir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
	st, _ := srv.final(as.ID)
	if st.Status != api.JobCompleted {
		t.Fatalf("final = %+v", st)
	}
	lines := srv.lines(as.ID)
	checkDense(t, lines, st.LastNodeSeq)
	if got := strings.Join(texts(lines, ""), ","); got != "before,middle,after" {
		t.Errorf("lines = %s", got)
	}
}

// TestAgentRestart stops an agent while its job runs and starts a new
// one on the same folder: the new agent reports the job from its state file.
func TestAgentRestart(t *testing.T) {
	srv := newFakeServer(t)
	as := assignment("orphan", `echo one; echo two; sleep 30`)
	st := restartBeforeDelivery(t, srv, as, 0, func() bool { return len(srv.lines(as.ID)) >= 2 }, 0, nil)
	if st.Status != api.JobFailed || !strings.Contains(st.Error, "agent is stopping") {
		t.Errorf("final = %+v", st)
	}
	checkDense(t, srv.lines(as.ID), st.LastNodeSeq)
}

// TestStartedSurvivesAgentRestart: a command that ended before the agent
// reported it running is reported once, its final status saying it
// started. If the agent stops before the server takes that status, the
// next agent sends it from the state file, still saying so: without it
// the server would record a job that ran as never started.
func TestStartedSurvivesAgentRestart(t *testing.T) {
	srv := newFakeServer(t)
	// It writes a file, so its artifacts are uploaded: while that retries
	// (the server is down), the state file must already say it started,
	// as an agent killed then would send what it holds.
	as := assignment("quick", `echo go; echo x > logs/extra.txt; sleep 0.3`)
	duringUpload := func(dir string) {
		ents, _ := os.ReadDir(filepath.Join(dir, "state"))
		for _, e := range ents {
			if b, _ := os.ReadFile(filepath.Join(dir, "state", e.Name())); !bytes.Contains(b, []byte(`"started":true`)) {
				t.Errorf("state file %s while the artifacts upload retries: %s; want it to say the job started", e.Name(), b)
			}
		}
		if len(ents) == 0 {
			t.Error("no state file while the artifacts upload retries")
		}
	}
	// The command ends while the server is down: its final status
	// cannot be delivered.
	st := restartBeforeDelivery(t, srv, as, time.Minute, func() bool { return len(srv.lines(as.ID)) >= 1 }, 2*time.Second, duringUpload)
	if st.Status != api.JobCompleted || !st.Started {
		t.Errorf("final = %s, started %v; want Completed, started", st.Status, st.Started)
	}
}

// restartBeforeDelivery runs an agent and gives it as; once ready holds,
// the server goes away and, settle later (when during, if set, looks at
// the agent's folder), the agent is stopped, so its last report fails. A
// new agent on the same folder then reports the job from its state file:
// restartBeforeDelivery returns that final status.
func restartBeforeDelivery(t *testing.T, srv *fakeServer, as api.Assignment, runningWait time.Duration, ready func() bool, settle time.Duration, during func(dir string)) api.AssignmentStatus {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{ServerURLs: []string{srv.srv.URL}, NodeID: "node-1", Token: srv.token, Dir: dir, RunningWait: runningWait,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond})
	}()
	srv.push("assign", as)
	waitFor(t, 10*time.Second, "the job's first lines", ready)
	srv.setDown(true)
	time.Sleep(settle)
	if during != nil {
		during(dir)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.final(as.ID); ok {
		t.Fatal("final status reported while the server was down")
	}
	srv.setDown(false)
	startAgent(t, srv, dir)
	waitFor(t, 10*time.Second, "the final status from the new agent", func() bool { _, ok := srv.final(as.ID); return ok })
	st, _ := srv.final(as.ID)
	return st
}

// TestNULsInOutputAreReplaced: a job printing binary data sends no NUL
// character, which no store keeps (a refused batch of lines would be sent
// again for ever, and the job would never end): U+FFFD stands for it.
func TestNULsInOutputAreReplaced(t *testing.T) {
	srv := newFakeServer(t)
	startAgent(t, srv, t.TempDir())
	as := assignment("bin", `printf 'a\000b\n'`)
	srv.push("assign", as)
	waitFor(t, 10*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
	if got := texts(srv.lines(as.ID), "stdout"); !slices.Contains(got, "a\uFFFDb") {
		t.Errorf("stdout lines %q, want \"a\\uFFFDb\"", got)
	}
}

func TestBindCommand(t *testing.T) {
	tests := []struct {
		command, want, wantErr string
	}{
		{command: "python train.py --lr ${{inputs.lr}}", want: "python train.py --lr 0.1"},
		{command: "echo ${{ inputs.lr }} > ${{outputs.model}}/x", want: "echo 0.1 > /out/model/x"},
		{command: "echo ${{inputs.missing}}", wantErr: "${{inputs.missing}} is not an input"},
		{command: "echo ${{outputs.nope}}", wantErr: "${{outputs.nope}} is not an output"},
		{command: "echo ${{search_space.x}} $HOME", want: "echo ${{search_space.x}} $HOME"},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			got, err := bindCommand(tt.command, map[string]string{"lr": "0.1"}, map[string]string{"model": "/out/model"})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestReadSSE(t *testing.T) {
	in := ": keep-alive\n\nevent: assign\ndata: {\"a\":\ndata: 1}\n\nid: 3\ndata: plain\r\n\r\n: tail\n"
	var got []sseEvent
	err := readSSE(strings.NewReader(in), func() {}, func(ev sseEvent) error {
		got = append(got, ev)
		return nil
	})
	if err == nil {
		t.Fatal("want an error at the end of the stream")
	}
	want := []sseEvent{{Name: "assign", Data: "{\"a\":\n1}"}, {Name: "message", Data: "plain"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
}

func TestFlagsRoundTrip(t *testing.T) {
	in := Flags{ServerURLs: []string{"http://a:1", "http://b:2"}, NodeID: "n1", Dir: "/tmp/n1",
		Capacity: api.Capacity{VCPUs: 4, MemoryGB: 14.5, GPUs: 2, GPUDevices: []string{"2", "3"}, Note: "logical: host has 2 cores"}}
	out, err := ParseFlags(in.Args())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(out.ServerURLs, ",") != "http://a:1,http://b:2" || out.NodeID != in.NodeID || out.Dir != in.Dir || !reflect.DeepEqual(out.Capacity, in.Capacity) {
		t.Fatalf("round trip: %+v != %+v", out, in)
	}
}

// TestLogSpool keeps the server away while a job prints more lines than
// the agent keeps in memory: the rest go to the spool file, and once the
// server is back every line arrives once, in order, and the spool is gone.
func TestLogSpool(t *testing.T) {
	defer func(n int) { maxPending = n }(maxPending)
	maxPending = 100
	srv := newFakeServer(t)
	dir := t.TempDir()
	startAgent(t, srv, dir)
	as := assignment("spool", `echo first; while [ ! -f go ]; do sleep 0.02; done; `+
		`i=1; while [ $i -le 3000 ]; do echo "line $i"; i=$((i+1)); done`)
	srv.push("assign", as)
	waitFor(t, 10*time.Second, "the first line", func() bool { return len(srv.lines(as.ID)) > 0 })
	jobDir := filepath.Join(dir, "jobs/ws1/spool/1")
	spool := filepath.Join(jobDir, ".tide/log-spool.jsonl")

	srv.setDown(true)
	if err := os.WriteFile(filepath.Join(jobDir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the job's last line in its log file", func() bool {
		b, _ := os.ReadFile(filepath.Join(jobDir, "logs/std_log.txt"))
		return strings.Contains(string(b), "line 3000\n")
	})
	b, err := os.ReadFile(spool)
	if err != nil {
		t.Fatalf("no spool while the server is away: %v", err)
	}
	// Memory holds maxPending lines, or a batch read back from the spool.
	if n := strings.Count(string(b), "\n"); n < 3000-max(maxPending, maxBatch) {
		t.Errorf("spool holds %d lines; want at least %d", n, 3000-max(maxPending, maxBatch))
	}

	srv.setDown(false)
	waitFor(t, 20*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
	st, _ := srv.final(as.ID)
	waitFor(t, 20*time.Second, "every line", func() bool { return int64(len(srv.lines(as.ID))) == st.LastNodeSeq })
	lines := srv.lines(as.ID)
	checkDense(t, lines, st.LastNodeSeq)
	for i, l := range lines[1:] {
		if want := fmt.Sprintf("line %d", i+1); l.Text != want {
			t.Fatalf("line %d is %q, want %q", i+2, l.Text, want)
		}
	}
	if _, err := os.Stat(spool); !os.IsNotExist(err) {
		t.Errorf("spool left behind: %v", err)
	}
}

// TestFirstLineLeavesAtOnce checks that a running job's first line is
// sent as soon as it is printed, not when the batch interval has passed,
// and that the lines after it wait for the interval (a chatty job sends
// few requests).
func TestFirstLineLeavesAtOnce(t *testing.T) {
	defer func(d time.Duration) { flushInterval = d }(flushInterval)
	flushInterval = 3 * time.Second
	srv := newFakeServer(t)
	dir := t.TempDir()
	startAgent(t, srv, dir)
	as := assignment("first", `echo first; while [ ! -f go ]; do sleep 0.02; done; echo second; sleep 30`)
	as.GraceSeconds = 1
	srv.push("assign", as)
	waitFor(t, 2*time.Second, "the first line, before the batch interval", func() bool { return len(srv.lines(as.ID)) > 0 })
	if err := os.WriteFile(filepath.Join(dir, "jobs/ws1/first/1/go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := len(srv.lines(as.ID)); n != 1 {
		t.Fatalf("%d lines sent within a second of the first, want 1 (the second waits for the interval)", n)
	}
	waitFor(t, 5*time.Second, "the second line, after the interval", func() bool { return len(srv.lines(as.ID)) == 2 })
}

// TestSecondAssignmentRefused checks that an agent refuses an assignment
// while it runs another, reports it in its heartbeat, stops what the
// heartbeat's answer says the server no longer places on the node, and
// runs the assignment the answer sends once the node runs nothing.
func TestSecondAssignmentRefused(t *testing.T) {
	srv := newFakeServer(t)
	startAgent(t, srv, t.TempDir())
	first := assignment("first", "echo start; sleep 30")
	first.GraceSeconds = 1
	second := assignment("second", "echo second")
	srv.push("assign", first)
	waitFor(t, 10*time.Second, "the first job's first line", func() bool { return len(srv.lines(first.ID)) > 0 })
	srv.push("assign", second)
	waitFor(t, 10*time.Second, "a heartbeat reporting the refusal", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for _, hb := range srv.beats {
			if slices.Contains(hb.Refused, second.ID) {
				return true
			}
		}
		return false
	})
	if len(srv.lines(second.ID)) > 0 {
		t.Fatal("the second assignment ran beside the first")
	}
	srv.replyToBeat(api.AgentHeartbeatReply{Cancel: []string{first.ID}})
	waitFor(t, 15*time.Second, "the first job's final status", func() bool { _, ok := srv.final(first.ID); return ok })
	if st, _ := srv.final(first.ID); st.Status != api.JobCanceled {
		t.Errorf("first job, stopped by the heartbeat's answer: %s %q; want Canceled", st.Status, st.Error)
	}
	srv.replyToBeat(api.AgentHeartbeatReply{Assign: &second})
	waitFor(t, 15*time.Second, "the second job's final status", func() bool { _, ok := srv.final(second.ID); return ok })
	if st, _ := srv.final(second.ID); st.Status != api.JobCompleted {
		t.Errorf("second job, sent again by the heartbeat's answer: %s %q; want Completed", st.Status, st.Error)
	}
}

// A job that wrote and printed nothing uploads no archive: its final
// status names the empty log file and the empty declared output instead,
// which the server keeps as it would an archive's.
func TestNothingWrittenIsReportedNotUploaded(t *testing.T) {
	srv := newFakeServer(t)
	dir := t.TempDir()
	startAgent(t, srv, dir)
	as := assignment("quiet", "true")
	as.Outputs = []string{"model"}
	srv.push("assign", as)
	waitFor(t, 10*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
	st, _ := srv.final(as.ID)
	if st.Status != api.JobCompleted {
		t.Fatalf("final status = %+v", st)
	}
	if want := []string{"outputs/model/", "logs/std_log.txt"}; !slices.Equal(st.EmptyArtifacts, want) {
		t.Errorf("empty_artifacts = %q, want %q", st.EmptyArtifacts, want)
	}
	srv.mu.Lock()
	_, uploaded := srv.artifacts[as.ID]
	srv.mu.Unlock()
	if uploaded {
		t.Error("an archive was uploaded for a job that wrote nothing")
	}
	if _, err := os.Stat(filepath.Join(dir, "jobs/ws1/quiet/1/logs/std_log.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a job that printed nothing has a log file on the node: %v", err)
	}

	// One byte anywhere, and the archive is sent as before.
	loud := assignment("loud", "echo x > $TIDE_OUTPUTS_DIR/model/w")
	loud.Outputs = []string{"model"}
	srv.push("assign", loud)
	waitFor(t, 10*time.Second, "the final status", func() bool { _, ok := srv.final(loud.ID); return ok })
	st, _ = srv.final(loud.ID)
	srv.mu.Lock()
	art := srv.artifacts[loud.ID]
	srv.mu.Unlock()
	files := untar(t, art)
	if st.EmptyArtifacts != nil || files["outputs/model/w"] != "x\n" {
		t.Errorf("empty_artifacts = %q, archive files %v", st.EmptyArtifacts, keys(files))
	}
	// The job printed nothing: its log file, created with the first
	// line, is still in the archive, empty, as in a quiet job's list.
	if log, ok := files["logs/std_log.txt"]; !ok || log != "" {
		t.Errorf("logs/std_log.txt in the archive: %q, %v", log, ok)
	}
}

// A command that ends within runningWait is reported once, its final
// status saying it started; a longer one is reported Running first, and
// its final status does not say it again.
func TestShortCommandIsReportedOnce(t *testing.T) {
	short, long := newFakeServer(t), newFakeServer(t)
	// (Waits far from the commands' times, so that a loaded machine
	// cannot turn one case into the other.)
	startAgentWith(t, short, t.TempDir(), 200*time.Millisecond)
	startAgentWith(t, long, t.TempDir(), time.Minute)
	for i, c := range []struct {
		srv     *fakeServer
		command string
		want    []string
		started bool
	}{
		{long, "true", []string{api.JobCompleted}, true},
		{short, "sleep 2", []string{api.JobRunning, api.JobCompleted}, false},
		{long, "exit 3", []string{api.JobFailed}, true},
	} {
		srv := c.srv
		as := assignment(fmt.Sprintf("job-%d", i), c.command)
		srv.push("assign", as)
		waitFor(t, 10*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
		srv.mu.Lock()
		sts := slices.Clone(srv.statuses[as.ID])
		srv.mu.Unlock()
		var got []string
		for _, st := range sts {
			got = append(got, st.Status)
		}
		if !slices.Equal(got, c.want) || sts[len(sts)-1].Started != c.started {
			t.Errorf("%s: reports %v, final started=%v; want %v, started=%v", c.command, got, sts[len(sts)-1].Started, c.want, c.started)
		}
	}
}
