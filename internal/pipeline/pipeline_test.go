package pipeline

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

// diamond: a feeds b and c, which both feed d.
func diamond(statuses map[string]string, continueOnFailure bool) *api.Job {
	in := func(step string) api.JobInput {
		return api.JobInput{Type: api.InputLiteral, Value: "${{parent.jobs." + step + ".outputs.out}}"}
	}
	step := func(inputs map[string]api.JobInput) *api.Job {
		return &api.Job{Type: "command", Command: "true", Inputs: inputs, Outputs: map[string]api.JobOutput{"out": {}}}
	}
	p := &api.Job{Name: "p", Type: api.JobTypePipeline, Status: api.JobRunning, Jobs: map[string]*api.Job{
		"a": step(nil),
		"b": step(map[string]api.JobInput{"x": in("a")}),
		"c": step(map[string]api.JobInput{"x": in("a")}),
		"d": step(map[string]api.JobInput{"x": in("b"), "y": in("c")}),
	}}
	if continueOnFailure {
		p.Settings = &api.PipelineSettings{ContinueOnStepFailure: true}
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		st := api.PipelineStep{Name: name, Status: api.StepWaiting}
		if s, ok := statuses[name]; ok {
			st.Status, st.Job = s, "p-"+name
		}
		p.Steps = append(p.Steps, st)
	}
	return p
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		statuses map[string]string
		cont     bool
		cancel   bool
		want     string // start|skip|cancel|status
	}{
		{"first step", nil, false, false, "a|||"},
		{"a running", map[string]string{"a": api.JobRunning}, false, false, "|||"},
		{"independent steps start together", map[string]string{"a": api.JobCompleted}, false, false, "b c|||"},
		{"join waits for both", map[string]string{"a": api.JobCompleted, "b": api.JobCompleted, "c": api.JobRunning}, false, false, "|||"},
		{"join starts", map[string]string{"a": api.JobCompleted, "b": api.JobCompleted, "c": api.JobCompleted}, false, false, "d|||"},
		{"all done", map[string]string{"a": api.JobCompleted, "b": api.JobCompleted, "c": api.JobCompleted, "d": api.JobCompleted}, false, false, "|||Completed"},
		{"failure stops the rest", map[string]string{"a": api.JobCompleted, "b": api.JobFailed, "c": api.JobRunning}, false, false, "|d|p-c|"},
		{"then fails", map[string]string{"a": api.JobCompleted, "b": api.JobFailed, "c": api.JobCanceled, "d": api.StepSkipped}, false, false, "|||Failed"},
		{"continue on failure runs independent steps", map[string]string{"a": api.JobCompleted, "b": api.JobFailed, "c": api.JobRunning}, true, false, "|d||"},
		{"continue on failure still fails", map[string]string{"a": api.JobCompleted, "b": api.JobFailed, "c": api.JobCompleted, "d": api.StepSkipped}, true, false, "|||Failed"},
		{"cancel cascades", map[string]string{"a": api.JobCompleted, "b": api.JobRunning, "c": api.JobQueued}, false, true, "|d|p-b p-c|"},
		{"canceled when none runs", map[string]string{"a": api.JobCompleted, "b": api.JobCanceled, "c": api.JobCanceled, "d": api.StepSkipped}, false, true, "|||Canceled"},
		{"cancel waits for CancelRequested steps", map[string]string{"a": api.JobCancelRequested}, false, true, "|b c d||"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := diamond(tt.statuses, tt.cont)
			if tt.cancel {
				p.Status = api.JobCancelRequested
			}
			d := Decide(p)
			got := strings.Join([]string{strings.Join(d.Start, " "), strings.Join(d.Skip, " "), strings.Join(d.Cancel, " "), d.Status}, "|")
			if got != tt.want {
				t.Errorf("Decide = %q, want %q (%+v)", got, tt.want, d)
			}
			if d.Status == api.JobFailed && !strings.Contains(d.Error, "step b (job p-b, failed)") {
				t.Errorf("error %q does not name the failed step", d.Error)
			}
		})
	}
}

func TestStepJob(t *testing.T) {
	def, lr := "fast", "0.5"
	p := &api.Job{Name: "p", Type: api.JobTypePipeline, ExperimentName: "exp",
		Inputs: map[string]api.JobInput{"lr": {Type: api.InputLiteral, Value: lr}, "data": {Type: "uri_folder", Path: "blob:00", Mode: "download"}},
		Jobs: map[string]*api.Job{
			"train": {Type: "command", Compute: "cpu", Component: &api.Component{
				Command: "train ${{inputs.lr}} ${{inputs.data}} ${{inputs.kind}} ${{outputs.model}}", Code: "blob:11",
				Inputs:  map[string]api.ComponentInput{"lr": {Type: "number"}, "data": {Type: "uri_folder"}, "kind": {Type: "string", Default: &def}, "opt": {Type: "string", Optional: true}},
				Outputs: map[string]api.JobOutput{"model": {Type: "uri_folder"}},
			}, Inputs: map[string]api.JobInput{
				"lr": {Type: api.InputLiteral, Value: "${{parent.inputs.lr}}"}, "data": {Type: api.InputLiteral, Value: "${{parent.inputs.data}}"},
			}, Outputs: map[string]api.JobOutput{"model": {Mode: "upload"}}},
			"score": {Type: "command", Command: "score ${{inputs.m}}", Inputs: map[string]api.JobInput{
				"m": {Type: api.InputLiteral, Value: "${{parent.jobs.train.outputs.model}}"}}},
		}}
	var asked []string
	ref := func(step, out string, file bool) (string, error) {
		asked = append(asked, step+"."+out)
		return "blob:22", nil
	}
	j, err := StepJob(p, "train", ref)
	if err != nil {
		t.Fatal(err)
	}
	if j.Parent != "p" || j.Step != "train" || j.Compute != "cpu" || j.ExperimentName != "exp" || j.Code != "blob:11" {
		t.Errorf("job = %+v", j)
	}
	if j.Inputs["lr"].Value != "0.5" || j.Inputs["data"].Path != "blob:00" || j.Inputs["data"].Mode != "download" || j.Inputs["kind"].Value != "fast" {
		t.Errorf("inputs = %+v", j.Inputs)
	}
	if _, ok := j.Inputs["opt"]; ok {
		t.Errorf("an optional input without a value was given one")
	}
	if j.Outputs["model"].Mode != "upload" || j.Outputs["model"].Type != "uri_folder" {
		t.Errorf("outputs = %+v", j.Outputs)
	}
	s, err := StepJob(p, "score", ref)
	if err != nil {
		t.Fatal(err)
	}
	if in := s.Inputs["m"]; in.Type != "uri_folder" || in.Path != "blob:22" || in.Mode != "ro_mount" || !slices.Equal(asked, []string{"train.model"}) {
		t.Errorf("bound input = %+v (asked %v)", in, asked)
	}
	// The reuse key follows the content, not the names.
	again, _ := StepJob(p, "train", ref)
	p.Inputs["lr"] = api.JobInput{Type: api.InputLiteral, Value: "0.6"}
	changed, _ := StepJob(p, "train", ref)
	if again.ReuseKey != j.ReuseKey || changed.ReuseKey == j.ReuseKey {
		t.Errorf("reuse keys: same input %v, changed input %v", again.ReuseKey == j.ReuseKey, changed.ReuseKey != j.ReuseKey)
	}
	_, err = StepJob(p, "score", func(string, string, bool) (string, error) { return "", errors.New("gone") })
	if err == nil || !strings.Contains(err.Error(), "jobs.score.inputs.m: output model of step train: gone") {
		t.Errorf("error = %v", err)
	}
}

// TestStepOutputPaths: a step's output goes to its own path, else to the
// path of the pipeline output it binds, else to Azure's default path in
// settings.default_datastore, else nowhere but the step's job.
func TestStepOutputPaths(t *testing.T) {
	p := &api.Job{Name: "p", Type: api.JobTypePipeline,
		Outputs: map[string]api.JobOutput{"final": {Path: "azureml://datastores/results/paths/final"}, "loose": {}},
		Jobs: map[string]*api.Job{
			"a": {Type: "command", Command: "true", Outputs: map[string]api.JobOutput{
				"own":     {Type: "uri_folder", Path: "azureml://datastores/blobs/paths/mine/${{name}}"},
				"none":    {Type: "uri_folder"},
				"final":   {Bind: "${{parent.outputs.final}}"},
				"unbound": {Bind: "${{parent.outputs.loose}}"},
			}},
			"b": {Type: "command", Component: &api.Component{Command: "true", Outputs: map[string]api.JobOutput{"model": {Type: "mlflow_model"}}}},
		}}
	paths := func(step string) map[string]string {
		j, err := StepJob(p, step, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for name, o := range j.Outputs {
			out[name] = o.Path
		}
		return out
	}
	want := map[string]string{"own": "azureml://datastores/blobs/paths/mine/${{name}}", "none": "", "final": "azureml://datastores/results/paths/final", "unbound": ""}
	if got := paths("a"); !maps.Equal(got, want) {
		t.Errorf("without default_datastore: %v, want %v", got, want)
	}
	p.Settings = &api.PipelineSettings{DefaultDatastore: "workspaceblobstore"}
	def := "azureml://datastores/workspaceblobstore/paths/azureml/${{name}}/${{output_name}}"
	want["none"], want["unbound"] = def, def
	if got := paths("a"); !maps.Equal(got, want) {
		t.Errorf("with default_datastore: %v, want %v", got, want)
	}
	if got := paths("b"); got["model"] != def {
		t.Errorf("a component's output with default_datastore: %v", got)
	}
}

func TestSweepStepJob(t *testing.T) {
	lrDefault, epochs := "0.5", "3"
	p := &api.Job{Name: "p", Type: api.JobTypePipeline, ExperimentName: "exp", Jobs: map[string]*api.Job{
		"prep": {Type: "command", Command: "true", Outputs: map[string]api.JobOutput{"data": {}}},
		"tune": {Type: api.JobTypeSweep, Compute: "cpu", EnvironmentVariables: map[string]string{"A": "1"},
			Trial: &api.Job{Component: &api.Component{Command: "train ${{inputs.lr}} ${{inputs.data}}",
				Inputs:  map[string]api.ComponentInput{"lr": {Type: "number", Default: &lrDefault}, "data": {Type: "uri_folder"}, "epochs": {Type: "integer", Default: &epochs}},
				Outputs: map[string]api.JobOutput{"model": {Type: "uri_folder"}}}},
			Inputs:      map[string]api.JobInput{"data": {Type: api.InputLiteral, Value: "${{parent.jobs.prep.outputs.data}}"}},
			SearchSpace: map[string]api.SearchDist{"lr": {Type: api.DistChoice, Values: []string{"1", "2"}}},
			Sampling:    &api.Sampling{Type: api.SamplingGrid}, Objective: &api.Objective{PrimaryMetric: "acc", Goal: api.GoalMaximize}},
	}}
	j, err := StepJob(p, "tune", func(step, out string, file bool) (string, error) { return "blob:33", nil })
	if err != nil {
		t.Fatal(err)
	}
	if j.Type != api.JobTypeSweep || j.Parent != "p" || j.Step != "tune" || j.Compute != "cpu" || j.ReuseKey != "" {
		t.Errorf("job = %+v", j)
	}
	if _, ok := j.Inputs["lr"]; ok || j.Inputs["data"].Path != "blob:33" || j.Inputs["epochs"].Value != "3" {
		t.Errorf("inputs = %+v: the swept lr must be left to the trials, data bound, epochs defaulted", j.Inputs)
	}
	if c := j.Trial.Component; c.EnvironmentVariables["A"] != "1" || j.Outputs["model"].Type != "uri_folder" || j.Sampling == p.Jobs["tune"].Sampling {
		t.Errorf("trial = %+v, outputs = %+v (the sweep gets its own sampling settings, where its seed goes)", c, j.Outputs)
	}
}
