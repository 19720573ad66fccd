package spec

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

func TestJobExamples(t *testing.T) {
	tests := []struct {
		file    string
		wantErr string // the whole error; empty: parses
		check   func(t *testing.T, j *api.Job)
	}{
		{"hello-code.yml", "", func(t *testing.T, j *api.Job) {
			if j.Code != "src" || j.Environment.Image != "library/python:latest" || j.Command != "ls" {
				t.Errorf("got %+v", j)
			}
		}},
		{"hello-data-uri-folder.yml", "", nil},
		{"hello-dataset.yml", "", nil},
		{"hello-git.yml", "", nil},
		{"hello-interactive.yml", "hello-interactive.yml:6: services: not supported yet (interactive services: VS Code, Jupyter, TensorBoard, SSH); remove it", nil},
		{"hello-iris-datastore-file.yml", "", func(t *testing.T, j *api.Job) {
			if in := j.Inputs["iris_csv"]; in.Type != api.InputURIFile || in.Mode != DefaultInputMode {
				t.Errorf("input = %+v", in)
			}
		}},
		{"hello-iris-datastore-folder.yml", "", nil},
		{"hello-iris-file.yml", "", nil},
		{"hello-iris-folder.yml", "", nil},
		{"hello-iris-literal.yml", "", func(t *testing.T, j *api.Job) {
			// "type" here is an input called type, with the literal value uri_file.
			if j.Inputs["type"].Value != "uri_file" || j.Inputs["iris_csv"].Type != api.InputLiteral {
				t.Errorf("inputs = %+v", j.Inputs)
			}
		}},
		{"hello-mlflow.yml", "", nil},
		{"hello-model-as-input.yml", "", func(t *testing.T, j *api.Job) {
			if in := j.Inputs["my_model"]; in.Type != api.InputMLflowModel || in.Mode != DefaultInputMode || in.Path != "../../assets/model/mlflow-model" {
				t.Errorf("a model input: %+v", in)
			}
		}},
		{"hello-model-as-output.yml", "", func(t *testing.T, j *api.Job) {
			if in, o := j.Inputs["input_model"], j.Outputs["output_folder"]; in.Type != api.InputMLflowModel || o.Type != api.InputCustomModel {
				t.Errorf("a model input and output: %+v %+v", in, o)
			}
		}},
		{"hello-notebook.yml", "", nil},
		{"hello-sweep.yml", "", func(t *testing.T, j *api.Job) {
			b, c := j.SearchSpace["B"], j.SearchSpace["C"]
			if j.Type != api.JobTypeSweep || j.Trial.Code != "src" || j.Trial.Environment.Ref != "azureml:AzureML-sklearn-1.5@latest" || j.Inputs["A"].Value != "0.5" {
				t.Errorf("sweep = %+v, trial = %+v", j, j.Trial)
			}
			if b.Type != api.DistChoice || len(b.Values) != 3 || c.Type != api.DistUniform || *c.MinValue != 0.1 || *c.MaxValue != 1 {
				t.Errorf("search space = %+v %+v", b, c)
			}
			if j.Sampling.Type != api.SamplingRandom || j.Objective.Goal != api.GoalMinimize || j.Limits.MaxTotalTrials != 4 || j.Limits.MaxConcurrentTrials != 2 || j.Limits.Timeout != 3600 {
				t.Errorf("settings = %+v %+v %+v", j.Sampling, j.Objective, j.Limits)
			}
		}},
		{"hello-world-env-var.yml", "", func(t *testing.T, j *api.Job) {
			if j.EnvironmentVariables["hello_env_var"] != "hello world" {
				t.Errorf("environment_variables = %v", j.EnvironmentVariables)
			}
		}},
		{"hello-world-input.yml", "", func(t *testing.T, j *api.Job) {
			if j.Inputs["hello_number"].Value != "42" || j.Inputs["hello_string"].Value != "hello world" {
				t.Errorf("inputs = %+v", j.Inputs)
			}
		}},
		{"hello-world-org.yml", "", func(t *testing.T, j *api.Job) {
			if j.ExperimentName != "hello-world-example" || j.DisplayName != "hello-world-example" || j.Tags["hello"] != "world" {
				t.Errorf("got %+v", j)
			}
		}},
		{"hello-world-output-data.yml", "", func(t *testing.T, j *api.Job) {
			if o := j.Outputs["hello_output"]; o.Type != api.InputURIFolder || o.Mode != DefaultOutputMode {
				t.Errorf("output = %+v", o)
			}
		}},
		{"hello-world-output.yml", "", nil},
		{"hello-world.yml", "", func(t *testing.T, j *api.Job) {
			if j.Type != JobTypeCommand || j.ExperimentName != DefaultExperimentName || j.Name != "" || j.Command != `echo "hello world"` {
				t.Errorf("got %+v", j)
			}
		}},
	}
	entries, err := os.ReadDir(filepath.Join(examples, "jobs/basics"))
	if err != nil {
		t.Skipf("example files not available: %v", err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			n++
		}
	}
	if n != len(tests) {
		t.Errorf("the example folder has %d files, the table %d: add the new ones", n, len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			j, err := ParseJob(tt.file, readExample(t, "jobs/basics/"+tt.file), nil)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("got:\n%v\nwant:\n%s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateJob(j); err != nil {
				t.Fatalf("ValidateJob: %v", err)
			}
			if tt.check != nil {
				tt.check(t, j)
			}
		})
	}
}

func TestJobErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		sets []string
		want string
	}{
		{"missing command", "environment:\n  image: python\n", nil,
			"j.yml: command: required; the shell command the job runs, e.g. python train.py --data ${{inputs.data}}"},
		{"unbound input", "command: echo ${{inputs.missing}}\n", nil,
			"j.yml:1: command: ${{inputs.missing}} is not defined under inputs; add inputs.missing or remove the reference"},
		{"unbound output", "command: echo ${{outputs.model}}\noutputs:\n  other:\n", nil,
			"j.yml:1: command: ${{outputs.model}} is not defined under outputs; add outputs.model or remove the reference"},
		{"optional input may be missing", "command: python t.py $[[--lr ${{inputs.lr}}]]\n", nil, ""},
		{"unknown binding", "command: echo ${{search_space.B}}\n", nil,
			"j.yml:1: command: ${{search_space.B}} is not a binding tide knows; use ${{inputs.NAME}} or ${{outputs.NAME}}"},
		{"typo", "command: ls\nenviroment: python\n", nil, `j.yml:2: unknown field "enviroment"; did you mean "environment"?`},
		{"inline environment without image", "command: ls\nenvironment:\n  conda_file: env.yml\n", nil,
			"j.yml:2: environment.image: required for an inline environment (a Docker image such as python:3.11, or build: {path: DIR}); or name a registered environment"},
		{"variable names a shell cannot read", "command: ls\nenvironment_variables:\n  OK_1: a\n  1BAD: b\n  A-B: c\n", nil,
			"j.yml:4: environment_variables.1BAD: \"1BAD\" is not a valid variable name: use letters, digits and '_', not starting with a digit (a shell could not read it, e.g. MY_VAR)\n" +
				"j.yml:5: environment_variables.A-B: \"A-B\" is not a valid variable name: use letters, digits and '_', not starting with a digit (a shell could not read it, e.g. MY_VAR)"},
		{"listing age not a number", "command: ls\nenvironment_variables:\n  DATASET_MOUNT_ATTRIBUTE_CACHE_TTL: 1m\n", nil,
			"j.yml:3: environment_variables.DATASET_MOUNT_ATTRIBUTE_CACHE_TTL: \"1m\" is not a number of milliseconds (e.g. 60000 reuses a folder's listing for a minute)"},
		{"build and image", "command: ls\nenvironment:\n  image: busybox\n  build:\n    path: docker\n", nil,
			"j.yml:3: environment.image: give either image or build, not both"},
		{"build without path", "command: ls\nenvironment:\n  build:\n    dockerfile_path: Dockerfile\n", nil,
			"j.yml:3: environment.build.path: required: a folder with a Dockerfile (the Docker build context)"},
		{"another Dockerfile", "command: ls\nenvironment:\n  build:\n    path: ctx\n    dockerfile_path: gpu.Dockerfile\n", nil,
			"j.yml:5: environment.build.dockerfile_path: not supported yet: tide builds the context's own Dockerfile; rename gpu.Dockerfile to Dockerfile in environment.build.path"},
		{"data input without path", "command: cat ${{inputs.d}}\ninputs:\n  d:\n    type: uri_file\n", nil,
			"j.yml:3: inputs.d.path: required for a uri_file input (a local path, an http(s) URL or a data reference)"},
		{"bad mode", "command: ls\ninputs:\n  d:\n    type: uri_folder\n    path: ./data\n    mode: rw_mount\n", nil,
			`j.yml:6: inputs.d.mode: must be one of ro_mount, download, direct, eval_mount, eval_download, got "rw_mount"`},
		{"direct of a local path", "command: ls\ninputs:\n  d:\n    type: uri_folder\n    path: ./data\n    mode: direct\n", nil,
			`j.yml:6: inputs.d.mode: direct gives the job the input's URI, and a local path has none once uploaded; use ro_mount or download, or give a URI (azureml://datastores/..., https://...)`},
		{"eval mode of a folder", "command: ls\ninputs:\n  d:\n    type: uri_folder\n    path: ./data\n    mode: eval_mount\n", nil,
			`j.yml:6: inputs.d.mode: eval_mount evaluates an MLTable file: only for type: mltable; use ro_mount`},
		{"bad input name", "command: ls\ninputs:\n  my-data: 3\n", nil,
			`j.yml:3: inputs.my-data: name "my-data" must be letters, digits and '_', not starting with a digit`},
		{"instance count", "command: ls\nresources:\n  instance_count: 0\n", nil, "j.yml:3: resources.instance_count: must be >= 1 (got 0)"},
		{"instance count type", "command: ls\nresources:\n  instance_count: two\n", nil, `j.yml:3: resources.instance_count: must be an integer, got "two"`},
		{"docker args", "command: ls\nresources:\n  docker_args: --privileged\n", nil,
			"j.yml:3: resources.docker_args: not supported yet; the compute's size (or a serverless job's instance_type) decides the node shape; remove it"},
		{"distribution field of another type", "command: ls\ndistribution:\n  type: tensorflow\n  process_count_per_instance: 2\n", nil,
			"j.yml:4: distribution.process_count_per_instance: not a tensorflow distribution field (it belongs to pytorch or mpi)"},
		{"distribution type", "command: ls\ndistribution:\n  type: ray\n", nil, `j.yml:3: distribution.type: "ray" is not supported; use pytorch, mpi or tensorflow`},
		{"pipeline without steps", "type: pipeline\njobs: {}\n", nil, "j.yml:2: jobs: required: the pipeline's steps, e.g. jobs: {train: {type: command, component: ./train.yml}}"},
		{"read-only", "command: ls\nstatus: Running\n", nil, "j.yml:2: status: read-only; set by the server (remove it from the file)"},
		{"compute name", "command: ls\ncompute: azureml:cpu_cluster\n", nil,
			`j.yml:2: compute: "cpu_cluster" has "_"; use only letters, digits and '-'`},
		{"job name", "command: ls\nname: my job\n", nil,
			`j.yml:2: name: "my job" must be 1-255 letters, digits, '_' and '-', starting with a letter or digit`},
		{"timeout", "command: ls\nlimits:\n  timeout: -1\n", nil, "j.yml:3: limits.timeout: must be >= 1 second (got -1)"},
		{"shm", "command: ls\nresources:\n  shm_size: lots\n", nil, `j.yml:3: resources.shm_size: "lots" must be a number with an optional unit b, k, m or g, e.g. 2g`},
		{"set", "command: ls\n", []string{"resources.instance_count=x"}, `--set: resources.instance_count: must be an integer, got "x"`},
		{"priority", "command: ls\nqueue_settings:\n  priority: urgent\n", nil,
			`j.yml:3: queue_settings.priority: want low, medium, high or a whole number from 1 to 1000 (got "urgent")`},
		{"numeric priority", "command: ls\nqueue_settings:\n  priority: 750\n  job_tier: Spot\n", nil, ""},
		{"job tier", "command: ls\nqueue_settings:\n  job_tier: gold\n", nil,
			`j.yml:3: queue_settings.job_tier: must be one of null, spot, basic, standard, premium, got "gold"`},
		{"retries", "command: ls\ntide:\n  retries:\n    on_exit_code: -2\n", nil,
			"j.yml:4: tide.retries.on_exit_code: want a whole number from 0 to 100 (got -2)"},
		{"retries typo", "command: ls\ntide:\n  retries:\n    on_node_failures: 2\n", nil,
			`j.yml:4: tide.retries: unknown field "on_node_failures"; did you mean "on_node_failure"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJob("j.yml", []byte(tt.yaml), tt.sets)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("got:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
}

func TestParseJobFull(t *testing.T) {
	src := `$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
name: train_1
type: Command
command: python train.py --data ${{inputs.data}} --lr ${{inputs.lr}} --out ${{outputs.model}}
code: ./src
environment: azureml:pytorch-env@latest
compute: azureml:gpu-cluster
inputs:
  data:
    type: uri_folder
    path: ./data
    mode: download
  lr: 0.01
outputs:
  model:
    type: uri_folder
resources:
  instance_count: 2
  shm_size: 16g
distribution:
  type: PyTorch
  process_count_per_instance: 4
limits:
  timeout: 3600
queue_settings:
  priority: high
tide:
  retries:
    on_node_failure: 5
    on_exit_code: 1
`
	j, err := ParseJob("j.yml", []byte(src), []string{"inputs.lr=0.1", "tags.team=ml"})
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "train_1" || j.Type != "command" || j.Compute != "gpu-cluster" || j.Environment.Ref != "azureml:pytorch-env@latest" ||
		j.Inputs["data"].Mode != "download" || j.Inputs["lr"].Value != "0.1" || j.Outputs["model"].Mode != DefaultOutputMode ||
		j.InstanceCount() != 2 || j.Resources.ShmSize != "16g" || j.Distribution.Type != "pytorch" ||
		j.Distribution.ProcessCountPerInstance != 4 || j.Limits.Timeout != 3600 || j.Tags["team"] != "ml" || j.Priority() != 300 {
		t.Errorf("got %+v", j)
	}
	if node, exit := j.RetryLimits(); node != 5 || exit != 1 {
		t.Errorf("retry limits %d, %d; want 5, 1", node, exit)
	}
	if node, exit := (&api.Job{}).RetryLimits(); node != api.DefaultRetriesOnNodeFailure || exit != api.DefaultRetriesOnExitCode || (&api.Job{}).Priority() != api.DefaultPriority {
		t.Errorf("got %+v", j)
	}
}

func TestBindCommand(t *testing.T) {
	in := map[string]string{"data": "/mnt/in/data", "lr": "0.1"}
	out := map[string]string{"model": "/mnt/out/model"}
	tests := []struct {
		cmd, want string
	}{
		{"python t.py --data ${{inputs.data}} --out ${{outputs.model}}", "python t.py --data /mnt/in/data --out /mnt/out/model"},
		{"echo ${{ inputs.lr }}${{inputs.lr}}", "echo 0.10.1"},
		{"python t.py $[[--lr ${{inputs.lr}}]] $[[--seed ${{inputs.seed}}]]", "python t.py --lr 0.1 "},
		{"echo ${{inputs.missing}}", "echo ${{inputs.missing}}"},
		{"if [ -f ${{inputs.data}} ]; then ls; fi", "if [ -f /mnt/in/data ]; then ls; fi"},
		{"no bindings", "no bindings"},
	}
	for _, tt := range tests {
		if got := BindCommand(tt.cmd, in, out); got != tt.want {
			t.Errorf("BindCommand(%q) = %q, want %q", tt.cmd, got, tt.want)
		}
	}
}

func TestNewJobName(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	re := regexp.MustCompile(`^[a-z]+_[a-z]+_[a-z0-9]{8}$`)
	seen := map[string]bool{}
	for range 1000 {
		n := NewJobName(r)
		if !re.MatchString(n) || !jobNameRE.MatchString(n) {
			t.Fatalf("NewJobName = %q", n)
		}
		if seen[n] {
			t.Fatalf("duplicate %q", n)
		}
		seen[n] = true
	}
	if a, b := NewJobName(rand.New(rand.NewPCG(7, 7))), NewJobName(rand.New(rand.NewPCG(7, 7))); a != b {
		t.Errorf("not deterministic: %q != %q", a, b)
	}
}

func FuzzParseJob(f *testing.F) {
	dir := filepath.Join(examples, "jobs/basics")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
			f.Add(data, "inputs.x=1")
		}
	}
	f.Add([]byte("command: echo ${{inputs.a}} $[[${{inputs.b}}]]\ninputs: {a: 1}\n"), "compute=azureml:x")
	for _, sweep := range []string{sweepBase, componentSweep, sweepPipeline} {
		f.Add([]byte(sweep), "sampling_algorithm=grid")
	}
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		j, err := ParseJob("f.yml", data, []string{set})
		if err == nil {
			if j == nil {
				t.Fatal("nil job without error")
			}
			in := map[string]string{}
			for k, v := range j.Inputs {
				in[k] = v.Value
			}
			_ = BindCommand(j.Command, in, nil)
		} else if AsErrors(err) == nil {
			t.Fatalf("error is not an Errors: %T %v", err, err)
		}
	})
}

// A NUL character cannot be stored (PostgreSQL's jsonb refuses \u0000), so
// the parser refuses it, naming the field, before any store sees it.
func TestNULRefused(t *testing.T) {
	for body, want := range map[string]string{
		`{"type": "command", "command": "echo a\u0000b", "compute": "c"}`:                                                                                                               "command: holds a NUL character",
		`{"type": "command", "command": "echo", "compute": "c", "environment_variables": {"A": "\u0000"}}`:                                                                              "environment_variables.A: holds a NUL character",
		`{"type": "command", "command": "echo", "compute": "c", "tags": {"a\u0000": "x"}}`:                                                                                              "the key holds a NUL character",
		`{"type": "command", "command": "echo", "compute": "c", "outputs": {"o": {"type": "uri_folder", "path": "x"}}, "services": null, "display_name": "x", "description": "\u0000"}`: "description: holds a NUL character",
	} {
		_, err := ParseJob("", []byte(body), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseJob(%s) = %v, want an error with %q", body, err, want)
		}
	}
}
