package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

const pipelineExamples = examples + "/jobs/pipelines-with-components/basics"

// Azure's pipeline examples parse (component files stay references for the
// CLI to read), and so do their component files.
func TestPipelineExamples(t *testing.T) {
	for _, dir := range []string{"1a_e2e_local_components", "3b_pipeline_with_data"} {
		data, err := os.ReadFile(filepath.Join(pipelineExamples, dir, "pipeline.yml"))
		if err != nil {
			t.Fatal(err)
		}
		j, err := ParseJob("pipeline.yml", data, nil)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if j.Type != api.JobTypePipeline || len(j.Jobs) != 3 {
			t.Fatalf("%s: type %s, %d steps", dir, j.Type, len(j.Jobs))
		}
		order, err := StepOrder(j)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v", dir, order)
	}
	data, err := os.ReadFile(filepath.Join(pipelineExamples, "1a_e2e_local_components/pipeline.yml"))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := ParseJob("pipeline.yml", data, nil)
	if got, _ := StepOrder(j); strings.Join(got, " ") != "train_job score_job evaluate_job" {
		t.Errorf("order = %v, want train, score, evaluate (score takes train's output)", got)
	}
	if b := j.Jobs["train_job"].Outputs["model_output"].Bind; b != "${{parent.outputs.pipeline_job_trained_model}}" {
		t.Errorf("output binding = %q", b)
	}
	c, err := os.ReadFile(filepath.Join(pipelineExamples, "1a_e2e_local_components/train.yml"))
	if err != nil {
		t.Fatal(err)
	}
	comp, err := ParseComponent("train.yml", c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if comp.Name != "train" || comp.Version != "10" || comp.Inputs["learning_rate"].Default == nil || *comp.Inputs["learning_rate"].Default != "0.01" || comp.Inputs["max_epocs"].Type != "integer" {
		t.Errorf("component = %+v", comp)
	}
}

// inlineComponent is a pipeline whose steps carry their components inline,
// as the CLI sends them once it has read the component files.
const inlineComponent = `type: pipeline
inputs:
  epochs: 3
  data:
    type: uri_folder
    path: blob:0000000000000000000000000000000000000000000000000000000000000000
outputs:
  final:
    mode: upload
jobs:
  train:
    component:
      type: command
      command: train --epochs ${{inputs.epochs}} --data ${{inputs.data}} --model ${{outputs.model}} $[[--lr ${{inputs.lr}}]]
      environment: azureml:py@latest
      inputs:
        epochs: {type: integer, min: 1}
        data: {type: uri_folder}
        lr: {type: number, optional: true}
        kind: {type: string, default: fast, enum: [fast, slow]}
      outputs:
        model: {type: uri_folder}
    inputs:
      epochs: ${{parent.inputs.epochs}}
      data: ${{parent.inputs.data}}
  score:
    command: score ${{inputs.model}} > ${{outputs.result}}/score
    environment: azureml:py@latest
    inputs:
      model: ${{parent.jobs.train.outputs.model}}
    outputs:
      result: ${{parent.outputs.final}}
`

func TestPipelineInline(t *testing.T) {
	j, err := ParseJob("p.yml", []byte(inlineComponent), nil)
	if err != nil {
		t.Fatal(err)
	}
	if deps := StepDependencies(j); strings.Join(deps["score"], ",") != "train" || len(deps["train"]) != 0 {
		t.Errorf("dependencies = %v", deps)
	}
}

func TestPipelineErrors(t *testing.T) {
	tests := []struct{ name, edit, want string }{
		{"cycle", "      model: ${{parent.jobs.train.outputs.model}}\n", ""},
		{"missing step", "  model: ${{parent.jobs.train.outputs.model}}=>  model: ${{parent.jobs.trian.outputs.model}}",
			"p.yml:30: jobs.score.inputs.model: ${{parent.jobs.trian.outputs.model}}: the pipeline has no step trian; steps: score, train"},
		{"missing output", "  model: ${{parent.jobs.train.outputs.model}}=>  model: ${{parent.jobs.train.outputs.weights}}",
			"p.yml:30: jobs.score.inputs.model: ${{parent.jobs.train.outputs.weights}}: step train has no output weights"},
		{"missing pipeline input", "epochs: ${{parent.inputs.epochs}}=>epochs: ${{parent.inputs.epoch}}",
			"p.yml:24: jobs.train.inputs.epochs: ${{parent.inputs.epoch}}: the pipeline has no input epoch; add inputs.epoch to the pipeline"},
		{"missing pipeline output", "${{parent.outputs.final}}=>${{parent.outputs.last}}",
			"p.yml:32: jobs.score.outputs.result: ${{parent.outputs.last}}: the pipeline has no output last; add outputs.last to the pipeline"},
		{"required input", "      data: ${{parent.inputs.data}}\n=>",
			"jobs.train.inputs.data: required by component of step train (a uri_folder input with no default); give it under jobs.train.inputs"},
		{"undeclared input", "      data: ${{parent.inputs.data}}\n=>      data: ${{parent.inputs.data}}\n      speed: 3\n",
			"p.yml:26: jobs.train.inputs.speed: component of step train declares no input speed; its inputs: data, epochs, kind, lr"},
		{"literal type", "  epochs: 3\n=>  epochs: three\n",
			`p.yml:24: jobs.train.inputs.epochs: "three" is not an integer`},
		{"range", "  epochs: 3\n=>  epochs: 0\n",
			"p.yml:24: jobs.train.inputs.epochs: 0 is below the minimum 1"},
		{"type mismatch", "        data: {type: uri_folder}=>        data: {type: string}",
			"p.yml:25: jobs.train.inputs.data: input is string, a value, but the step gives uri_folder data"},
		{"output feeds a literal", "      epochs: ${{parent.inputs.epochs}}=>      epochs: ${{parent.jobs.score.outputs.result}}",
			""},
		{"enum default", "default: fast=>default: medium", `jobs.train.component.inputs.kind.default: "medium" is not one of fast, slow`},
		{"binding inside text", "      epochs: ${{parent.inputs.epochs}}=>      epochs: x${{parent.inputs.epochs}}",
			`p.yml:24: jobs.train.inputs.epochs: "x${{parent.inputs.epochs}}": a binding must be the whole value: ${{parent.inputs.NAME}} or ${{parent.jobs.STEP.outputs.NAME}}`},
		{"both component and command", "    environment: azureml:py@latest\n    inputs:\n      model=>    component: azureml:x:1\n    environment: azureml:py@latest\n    inputs:\n      model",
			"jobs.score.command: a step runs either a component or a command; remove one"},
		{"default_datastore a path", "outputs:\n  final:=>settings:\n  default_datastore: azureml://datastores/blobs/paths/x\noutputs:\n  final:",
			`p.yml:8: settings.default_datastore: "azureml://datastores/blobs/paths/x": name a datastore, as in azureml:workspaceblobstore`},
		{"sweep step", "  score:\n    command=>  score:\n    type: sweep\n    command",
			"p.yml:26: jobs.score.component: a sweep step runs its trial:; put the component there (trial: ./train.yml)"},
		{"unknown command binding", "score ${{inputs.model}}=>score ${{inputs.modle}}",
			"jobs.score.command: ${{inputs.modle}} is not defined under inputs; add inputs.modle or remove the reference"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := inlineComponent
			switch {
			case tt.name == "cycle":
				// train takes score's output, which takes train's.
				doc = strings.Replace(doc, "      data: ${{parent.inputs.data}}\n", "      data: ${{parent.jobs.score.outputs.result}}\n", 1)
				tt.want = "steps score, train depend on each other in a cycle"
			case tt.name == "output feeds a literal":
				old, new, _ := strings.Cut(tt.edit, "=>")
				doc = strings.Replace(doc, old, new, 1)
				tt.want = "jobs.train.inputs.epochs: ${{parent.jobs.score.outputs.result}} is a uri_folder output but input epochs of component of step train is integer"
			default:
				old, new, _ := strings.Cut(tt.edit, "=>")
				if !strings.Contains(doc, old) {
					t.Fatalf("edit %q does not apply", old)
				}
				doc = strings.Replace(doc, old, new, 1)
			}
			_, err := ParseJob("p.yml", []byte(doc), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}

func TestComponentRefs(t *testing.T) {
	for in, want := range map[string]string{
		"azureml:train:3":      "azureml:train:3",
		"azureml:train@latest": "azureml:train@latest",
		"azureml:train":        "azureml:train@latest",
	} {
		r, err := ParseComponentRef(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseComponentRef(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, bad := range []string{"train:3", "azureml:train@v2", "azureml://registries/azureml/components/x/versions/1", "azureml:Bad Name:1"} {
		if _, err := ParseComponentRef(bad); err == nil {
			t.Errorf("ParseComponentRef(%q) accepted", bad)
		}
	}
	for in, want := range map[string]bool{"./train.yml": true, "file:./train.yml": true, "train.yaml": true, "azureml:train:1": false, "../c/x.yml": true} {
		if _, got := ComponentFile(in); got != want {
			t.Errorf("ComponentFile(%q) = %v", in, got)
		}
	}
}

func FuzzParsePipeline(f *testing.F) {
	f.Add([]byte(inlineComponent))
	f.Add([]byte("type: pipeline\njobs:\n  a:\n    command: echo\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := ParseJob("p.yml", data, nil)
		if err == nil && j.Type == api.JobTypePipeline {
			if _, err := StepOrder(j); err != nil {
				t.Fatalf("a valid pipeline has no step order: %v", err)
			}
		}
	})
}
