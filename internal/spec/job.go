package spec

import (
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

// MaxProcessesPerNode bounds the processes a distributed job starts on one
// node, so a typo cannot fork thousands of processes on a node.
const MaxProcessesPerNode = 256

// Job defaults, from Azure ML's command job YAML reference.
const (
	JobTypeCommand        = "command"
	DefaultExperimentName = "Default"
	// DefaultInputMode and DefaultOutputMode are Azure's defaults for data
	// inputs and outputs.
	DefaultInputMode  = "ro_mount"
	DefaultOutputMode = "rw_mount"
	// DefaultOutputType is the type of an output declared without one.
	DefaultOutputType = api.InputURIFolder
)

var unsupportedJobTypes = []string{"parallel", "spark", "automl", "import", "data_transfer", "finetuning", "distillation"}

var jobFields = []string{
	"$schema", "type", "name", "display_name", "experiment_name", "description", "tags",
	"command", "code", "environment", "environment_variables", "inputs", "outputs",
	"compute", "resources", "distribution", "limits", "queue_settings", "identity", "tide",
}

// jobUnsupported are Azure ML command job fields tide does not implement,
// with what to tell the user.
var jobUnsupported = map[string]string{
	"services":           "not supported yet (interactive services: VS Code, Jupyter, TensorBoard, SSH); remove it",
	"properties":         "not supported yet; use tags",
	"trial":              "belongs to sweep jobs; set type: sweep",
	"search_space":       "belongs to sweep jobs; set type: sweep",
	"sampling_algorithm": "belongs to sweep jobs; set type: sweep",
	"objective":          "belongs to sweep jobs; set type: sweep",
	"early_termination":  "belongs to sweep jobs; set type: sweep",
	"jobs":               "belongs to pipeline jobs; set type: pipeline",
	"settings":           "belongs to pipeline jobs; set type: pipeline",
}

// jobStatusFields are set by the server.
var jobStatusFields = map[string]bool{
	"id": true, "workspace": true, "status": true, "created_on": true, "start_time": true,
	"end_time": true, "exit_code": true, "error": true, "log_tail": true, "ranks": true,
	"attempt": true, "created_by": true, "pending_reason": true, "etag": true, "parent": true, "step": true, "metrics": true, "steps": true, "reuse_key": true, "resolved_environment": true, "creation_context": true, "retried": true, "queue_position": true,
	"serverless": true, "cost": true, "usage": true, "trials": true, "best_trial": true, "parameters": true, "params": true, "empty_artifacts": true,
}

// jobTypesText says which job types tide runs, for errors.
const jobTypesText = "tide supports type: command, type: pipeline and type: sweep"

// dataTypesText lists the data types for errors.
const dataTypesText = "uri_file, uri_folder, mlflow_model, custom_model, triton_model or mltable"

var (
	inputModes    = []string{"ro_mount", "download", "direct", "eval_mount", "eval_download"}
	outputModes   = []string{"rw_mount", "upload"}
	literalTypes  = []string{"string", "integer", "number", "boolean"}
	distTypes     = []string{"pytorch", "mpi", "tensorflow"}
	shmSizeRE     = regexp.MustCompile(`^[0-9]+[bkmgBKMG]?$`)
	jobNameRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$`)
	ioNameRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)
	bindingRE     = regexp.MustCompile(`\$\{\{\s*([^{}]*?)\s*\}\}`)
	optionalRE    = regexp.MustCompile(`(?s)\$\[\[(.*?)\]\]`)
	referenceExpr = regexp.MustCompile(`^(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)$`)
)

// ParseJob parses a command job file (YAML or JSON). sets are "--set
// path=value" overrides applied before decoding, as for ParseCompute. The
// result has Azure's defaults (type command, experiment_name Default, data
// input mode ro_mount, outputs uri_folder in rw_mount) and the compute
// without its "azureml:" prefix. Name may be empty: the server then
// generates one with NewJobName. It also runs ValidateJob. The error is an
// Errors.
func ParseJob(file string, data []byte, sets []string) (*api.Job, error) {
	d := newDecoder(file)
	root := d.parse(data, sets)
	if root == nil {
		return nil, d.err()
	}
	j := &api.Job{Type: JobTypeCommand}
	if !d.jobType(root, j) {
		return nil, d.err()
	}
	switch j.Type {
	case api.JobTypePipeline:
		return d.pipeline(root, j)
	case api.JobTypeSweep:
		return d.sweep(root, j)
	}
	d.mapping(root, "", jobFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonField(j, key, v, fp) {
			return true
		}
		switch key {
		case "command":
			j.Command, _ = d.str(v, fp)
		case "code":
			j.Code, _ = d.str(v, fp)
		case "environment":
			j.Environment = d.environment(v, fp)
		case "environment_variables":
			j.EnvironmentVariables = d.strMap(v, fp)
		case "resources":
			j.Resources = d.resources(v, fp)
		case "distribution":
			j.Distribution = d.distribution(v, fp)
		case "limits":
			j.Limits = d.limits(v, fp, false)
		case "queue_settings":
			j.QueueSettings = d.queueSettings(v, fp)
		case "identity":
			j.Identity = d.jobIdentity(v, fp)
		case "tide":
			j.Tide = d.extensions(v, fp)
		default:
			if msg, ok := jobUnsupported[key]; ok {
				d.notSupported(fp, msg)
				return true
			}
			if jobStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	return d.finish(j)
}

// commonField decodes a field every job type has (name, display name,
// experiment, description, tags, inputs, outputs, compute); it returns
// false for the others.
func (d *decoder) commonField(j *api.Job, key string, v *yaml.Node, fp string) bool {
	switch key {
	case "$schema", "type":
	case "name":
		j.Name, _ = d.str(v, fp)
	case "display_name":
		j.DisplayName, _ = d.str(v, fp)
	case "experiment_name":
		j.ExperimentName, _ = d.str(v, fp)
	case "description":
		j.Description, _ = d.str(v, fp)
	case "tags":
		j.Tags = d.strMap(v, fp)
	case "inputs":
		j.Inputs = d.inputs(v, fp)
	case "outputs":
		j.Outputs = d.outputs(v, fp)
	case "compute":
		j.Compute, _ = d.str(v, fp)
	default:
		return false
	}
	return true
}

// finish gives a job that decoded without errors Azure's defaults and
// checks it, reporting problems on the lines of their fields.
func (d *decoder) finish(j *api.Job) (*api.Job, error) {
	if len(d.errs) == 0 {
		defaultJob(j)
		checkJob(j, func(field, format string, args ...any) {
			d.add(d.lineFor(field), field, format, args...)
		})
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return j, nil
}

func (d *decoder) jobType(root *yaml.Node, j *api.Job) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "type" {
			continue
		}
		v := root.Content[i+1]
		d.lines["type"] = lineOf(v, root.Content[i])
		s, ok := d.str(v, "type")
		if !ok {
			return isNull(v) // null means the default
		}
		t := strings.ToLower(strings.TrimSpace(s))
		switch {
		case t == JobTypeCommand || t == api.JobTypePipeline || t == api.JobTypeSweep:
			j.Type = t
			return true
		case slices.Contains(unsupportedJobTypes, t):
			d.add(d.lines["type"], "type", "%s jobs are not supported yet; %s", t, jobTypesText)
		default:
			d.add(d.lines["type"], "type", "%q is not a job type; %s", s, jobTypesText)
		}
		return false
	}
	return true
}

// lineCheck records a range problem on the field at fp, unless decoding it
// already failed (the type error says enough).
func (d *decoder) lineCheck(fp, format string, args ...any) {
	for _, e := range d.errs {
		if e.Field == fp {
			return
		}
	}
	d.add(d.lines[fp], fp, format, args...)
}

// defaultJob fills in Azure's defaults.
func defaultJob(j *api.Job) {
	if j.Type == "" {
		j.Type = JobTypeCommand
	}
	if j.ExperimentName == "" {
		j.ExperimentName = DefaultExperimentName
	}
	j.Compute = strings.TrimPrefix(strings.TrimSpace(j.Compute), "azureml:")
	for name, in := range j.Inputs {
		if api.IsDataType(in.Type) && in.Mode == "" {
			in.Mode = DefaultInputMode
			j.Inputs[name] = in
		}
	}
	for name, o := range j.Outputs {
		if o.Type == "" {
			o.Type = DefaultOutputType
		}
		if o.Mode == "" {
			o.Mode = DefaultOutputMode
		}
		j.Outputs[name] = o
	}
}

// varNameRE is an environment variable name a shell can read.
var varNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateJob checks a command job in full: type, names, command and its
// ${{inputs.x}} / ${{outputs.y}} bindings, inputs, outputs, environment,
// resources, distribution and limits. It does not apply defaults; ParseJob
// does. The error is an Errors.
func ValidateJob(j *api.Job) error {
	var errs collector
	checkJob(j, func(field, format string, args ...any) { errs.add(0, field, format, args...) })
	return errs.err()
}

func checkJob(j *api.Job, bad func(field, format string, args ...any)) {
	if j.Name != "" && !jobNameRE.MatchString(j.Name) {
		bad("name", "%q must be 1-255 letters, digits, '_' and '-', starting with a letter or digit", j.Name)
	}
	if j.ExperimentName != "" && !jobNameRE.MatchString(j.ExperimentName) {
		bad("experiment_name", "%q must be 1-255 letters, digits, '_' and '-', starting with a letter or digit", j.ExperimentName)
	}
	switch t := strings.ToLower(j.Type); {
	case t == "" || t == JobTypeCommand:
	case t == api.JobTypePipeline:
		checkPipeline(j, bad)
		return
	case t == api.JobTypeSweep:
		checkSweep(j, bad)
		return
	case slices.Contains(unsupportedJobTypes, t):
		bad("type", "%s jobs are not supported yet; %s", t, jobTypesText)
		return
	default:
		bad("type", "%q is not a job type; %s", j.Type, jobTypesText)
		return
	}
	if len(j.Jobs) > 0 || j.Settings != nil || j.Component != nil {
		bad("jobs", "jobs, settings and component belong to pipeline jobs; set type: pipeline")
	}
	if j.Trial != nil || len(j.SearchSpace) > 0 || j.Sampling != nil || j.Objective != nil || j.EarlyTermination != nil {
		bad("trial", "trial, search_space, sampling_algorithm, objective and early_termination belong to sweep jobs; set type: sweep")
	}
	if l := j.Limits; l != nil && l.MaxTotalTrials+l.MaxConcurrentTrials+l.TrialTimeout != 0 {
		bad("limits", "max_total_trials, max_concurrent_trials and trial_timeout belong to sweep jobs; set type: sweep")
	}
	checkJobBody(j, bad)
	checkQueue(j, bad)
}

// checkJobBody checks what a command job runs: command and its bindings,
// code, compute, environment, inputs, outputs, resources, distribution and
// limits. Pipeline steps and components are checked with it too.
func checkJobBody(j *api.Job, bad func(field, format string, args ...any)) {
	if strings.TrimSpace(j.Command) == "" {
		bad("command", "required; the shell command the job runs, e.g. python train.py --data ${{inputs.data}}")
	} else {
		for _, p := range commandProblems(j.Command, j.Inputs, j.Outputs) {
			bad("command", "%s", p)
		}
	}
	if j.Code != "" {
		if kind, problem := ClassifyDataPath(j.Code); problem != "" {
			bad("code", "%s", problem)
		} else if kind != PathLocal && kind != PathBlob {
			bad("code", "%q: code is a local folder (relative to the job file), which the CLI uploads", j.Code)
		}
	}
	if j.Compute != "" {
		if msg := computeNameProblem(j.Compute); msg != "" {
			bad("compute", "%s", msg)
		}
	}
	// environment: file:PATH is read by the CLI, relative to the job
	// file; the service refuses one that reaches it unread.
	if e := j.Environment; e != nil && e.Ref != "" && !strings.HasPrefix(e.Ref, "file:") {
		if _, err := ParseEnvironmentRef(e.Ref); err != nil {
			bad("environment", "%s", err.(*FieldError).Message)
		}
	}
	if e := j.Environment; e != nil && e.Ref == "" {
		switch {
		case e.Build != nil && e.Build.Path == "":
			bad("environment.build.path", "required: a folder with a Dockerfile (the Docker build context)")
		case e.Build != nil && e.Image != "":
			bad("environment.image", "give either image or build, not both")
		case e.Image == "" && e.Build == nil:
			bad("environment.image", "required for an inline environment (a Docker image such as python:3.11, or build: {path: DIR}); or name a registered environment")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(j.EnvironmentVariables)) {
		if !varNameRE.MatchString(k) {
			bad("environment_variables."+k, "%q is not a valid variable name: use letters, digits and '_', not starting with a digit (a shell could not read it, e.g. MY_VAR)", k)
		}
	}
	if _, err := api.AttributeCacheTTL(j.EnvironmentVariables); err != nil {
		bad("environment_variables."+api.AttributeCacheTTLVar, "%s", strings.TrimPrefix(err.Error(), "environment_variables."+api.AttributeCacheTTLVar+": "))
	}
	for _, name := range sortedNames(j.Inputs) {
		in, fp := j.Inputs[name], "inputs."+name
		switch in.Type {
		case api.InputLiteral, "":
		case api.InputURIFile, api.InputURIFolder, api.InputMLflowModel, api.InputCustomModel, api.InputTritonModel, api.InputMLTable:
			if strings.TrimSpace(in.Path) == "" {
				bad(fp+".path", "required for a %s input (a local path, an http(s) URL or a data reference)", in.Type)
			}
			if in.Mode != "" && !slices.Contains(inputModes, in.Mode) {
				bad(fp+".mode", "must be one of %s, got %q", strings.Join(inputModes, ", "), in.Mode)
			} else if strings.HasPrefix(in.Mode, "eval_") && in.Type != api.InputMLTable {
				base, _ := api.EvaluatedMode(in.Mode)
				bad(fp+".mode", "%s evaluates an MLTable file: only for type: mltable; use %s", in.Mode, base)
			}
			kind, problem := ClassifyDataPath(in.Path)
			if problem != "" && strings.TrimSpace(in.Path) != "" {
				bad(fp+".path", "%s", problem)
			}
			if in.Mode == "direct" && kind == PathLocal {
				bad(fp+".mode", "direct gives the job the input's URI, and a local path has none once uploaded; use ro_mount or download, or give a URI (azureml://datastores/..., https://...)")
			}
		default:
			bad(fp+".type", "unknown input type %q; use %s, or a literal value", in.Type, dataTypesText)
		}
	}
	for _, name := range sortedNames(j.Outputs) {
		o, fp := j.Outputs[name], "outputs."+name
		if o.Type != "" && !api.IsDataType(o.Type) {
			bad(fp+".type", "unknown output type %q; use %s", o.Type, dataTypesText)
		}
		if o.Mode != "" && !slices.Contains(outputModes, o.Mode) {
			bad(fp+".mode", "must be one of %s, got %q", strings.Join(outputModes, ", "), o.Mode)
		}
	}
	if r := j.Resources; r != nil {
		if r.InstanceCount < 0 {
			bad("resources.instance_count", "must be >= 1 (got %d)", r.InstanceCount)
		}
		if r.ShmSize != "" && !shmSizeRE.MatchString(r.ShmSize) {
			bad("resources.shm_size", "%q must be a number with an optional unit b, k, m or g, e.g. 2g", r.ShmSize)
		}
	}
	if dist := j.Distribution; dist != nil {
		switch {
		case dist.Type == "":
			bad("distribution.type", "required; one of pytorch, mpi, tensorflow")
		case !slices.Contains(distTypes, dist.Type):
			bad("distribution.type", "%q is not supported; use pytorch, mpi or tensorflow", dist.Type)
		}
		if dist.ProcessCountPerInstance < 0 {
			bad("distribution.process_count_per_instance", "must be >= 1 (got %d)", dist.ProcessCountPerInstance)
		}
		if dist.WorkerCount < 0 {
			bad("distribution.worker_count", "must be >= 1 (got %d)", dist.WorkerCount)
		}
		if dist.ParameterServerCount < 0 {
			bad("distribution.parameter_server_count", "must be >= 0 (got %d)", dist.ParameterServerCount)
		}
		if dist.ProcessCountPerInstance > MaxProcessesPerNode {
			bad("distribution.process_count_per_instance", "must be at most %d (got %d); a node runs one process per rank", MaxProcessesPerNode, dist.ProcessCountPerInstance)
		}
		if tasks, nodes := dist.WorkerCount+dist.ParameterServerCount, j.InstanceCount(); tasks > MaxProcessesPerNode*nodes {
			bad("distribution.worker_count", "%d workers and parameter servers on %d node(s) exceed %d processes per node; lower them or raise resources.instance_count", tasks, nodes, MaxProcessesPerNode)
		}
	}
	if l := j.Limits; l != nil && l.Timeout < 0 {
		bad("limits.timeout", "must be >= 1 second (got %d)", l.Timeout)
	}
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Words for NewJobName, in the style of the names Azure ML gives jobs.
var (
	nameAdjectives = []string{
		"amiable", "bold", "brave", "bright", "busy", "calm", "clever", "cool", "crisp", "eager",
		"gentle", "happy", "honest", "jolly", "keen", "kind", "lively", "loyal", "lucid", "mighty",
		"modest", "neat", "nifty", "polite", "quiet", "quirky", "shy", "sincere", "steady", "sunny",
		"swift", "tender", "tidy", "upbeat", "vivid", "wise", "witty", "zealous",
	}
	nameNouns = []string{
		"apple", "badger", "basket", "brush", "cactus", "camera", "carrot", "cherry", "cloud", "coconut",
		"engine", "feather", "garden", "ginger", "guava", "kettle", "kiwi", "lamp", "lemon", "lettuce",
		"mango", "market", "napkin", "onion", "orange", "owl", "pasta", "peach", "pencil", "pepper",
		"pillow", "plum", "rainbow", "river", "rocket", "spoon", "tomato", "tree", "yacht", "zebra",
	}
)

const nameAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewJobName returns a job name such as sincere_apple_4bq7w2k9, as Azure ML
// generates for jobs submitted without one: an adjective, a noun and eight
// random lower-case letters and digits. r is passed in so tests and the
// simulator are deterministic.
func NewJobName(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(nameAdjectives[r.IntN(len(nameAdjectives))])
	b.WriteByte('_')
	b.WriteString(nameNouns[r.IntN(len(nameNouns))])
	b.WriteByte('_')
	for range 8 {
		b.WriteByte(nameAlphabet[r.IntN(len(nameAlphabet))])
	}
	return b.String()
}
