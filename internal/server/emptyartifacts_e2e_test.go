package server_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// A job that printed and wrote nothing uploads no archive (its agent
// reports the empty files instead), and users see what they saw when it
// did: its empty log file among its artifacts, and its declared output as
// an empty folder that the next pipeline step reads.
func TestNothingWrittenStillShowsEmptyOutputs(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)
	const pipeline = `type: pipeline
settings:
  default_compute: azureml:cpu-cluster
jobs:
  quiet:
    command: "true"
    outputs:
      out:
        type: uri_folder
  use:
    command: echo "files=$(ls -A ${{inputs.x}} | wc -l)"
    inputs:
      x: ${{parent.jobs.quiet.outputs.out}}
`
	step := runPipeline(t, in, pipeline)
	if text := logText(t, in, step["use"]); !strings.Contains(text, "files=0") {
		t.Errorf("the step after read:\n%s", text)
	}
	ctx := context.Background()
	arts, err := in.client.Artifacts(ctx, "default", step["quiet"])
	if err != nil || len(arts) != 1 || arts[0].Path != "logs/std_log.txt" || arts[0].Size != 0 {
		t.Fatalf("artifacts of the quiet step: %+v, %v; want the empty logs/std_log.txt alone", arts, err)
	}
	body, _, err := in.client.OpenArtifact(ctx, "default", step["quiet"], "logs/std_log.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	if b, err := io.ReadAll(body); err != nil || len(b) != 0 {
		t.Errorf("logs/std_log.txt: %q, %v", b, err)
	}
}

// The first attempt's empty files are kept in the job's record, a later
// attempt's in the server's files: whichever attempt came last is what
// users see, an empty log over a full one and a full one over an empty one.
func TestLaterAttemptsEmptyArtifactsWin(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)
	const retry = "\ncompute: cpu-cluster\ntide:\n  retries:\n    on_exit_code: 1\n"
	loudThenQuiet := submit(t, in, `command: 'if [ "$TIDE_ATTEMPT" = 1 ]; then echo first; exit 3; fi'`+retry)
	quietThenLoud := submit(t, in, `command: 'if [ "$TIDE_ATTEMPT" = 1 ]; then exit 3; fi; echo second'`+retry)
	ctx := context.Background()
	for name, want := range map[string]string{loudThenQuiet.Name: "", quietThenLoud.Name: "second\n"} {
		if j := waitJob(t, in, name, 60*time.Second); j.Status != api.JobCompleted || j.Attempt != 2 {
			t.Fatalf("job %s: %s, attempt %d (%s)", name, j.Status, j.Attempt, j.Error)
		}
		arts, err := in.client.Artifacts(ctx, "default", name)
		if err != nil || len(arts) != 1 || arts[0].Path != "logs/std_log.txt" || arts[0].Size != int64(len(want)) {
			t.Errorf("artifacts of %s: %+v, %v; want logs/std_log.txt of %d bytes", name, arts, err, len(want))
			continue
		}
		body, _, err := in.client.OpenArtifact(ctx, "default", name, "logs/std_log.txt")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(body)
		body.Close()
		if err != nil || string(b) != want {
			t.Errorf("logs/std_log.txt of %s: %q, %v; want %q", name, b, err, want)
		}
	}
}

// runPipeline runs a pipeline to completion and returns its steps' jobs by
// step name.
func runPipeline(t *testing.T, in *instance, yml string) map[string]string {
	t.Helper()
	p := waitJob(t, in, submit(t, in, yml).Name, 120*time.Second)
	if p.Status != api.JobCompleted {
		evs, _ := in.client.JobEvents(context.Background(), "default", p.Name)
		for _, e := range evs {
			t.Logf("event %s: %s", e.Kind, e.Message)
		}
		t.Fatalf("pipeline %s: %s (%s)", p.Name, p.Status, p.Error)
	}
	step := map[string]string{}
	for _, st := range p.Steps {
		step[st.Name] = st.Job
	}
	return step
}
