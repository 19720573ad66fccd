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

// runPipeline runs a pipeline to completion and returns its steps' jobs by
// step name.
func runPipeline(t *testing.T, in *instance, yml string) map[string]string {
	t.Helper()
	p := waitJob(t, in, submit(t, in, yml).Name, 120*time.Second)
	if p.Status != api.JobCompleted {
		t.Fatalf("pipeline %s: %s (%s)", p.Name, p.Status, p.Error)
	}
	step := map[string]string{}
	for _, st := range p.Steps {
		step[st.Name] = st.Job
	}
	return step
}
