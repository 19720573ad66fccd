package spec

import (
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var pipelineFields = []string{
	"$schema", "type", "name", "display_name", "experiment_name", "description", "tags",
	"inputs", "outputs", "settings", "jobs", "compute", "command",
}

var stepFields = []string{
	"type", "component", "command", "code", "environment", "environment_variables", "inputs", "outputs",
	"compute", "resources", "distribution", "limits", "display_name", "description", "tags", "name",
	"trial", "search_space", "sampling_algorithm", "objective", "early_termination",
}

// pipelineUnsupported are pipeline job fields tide does not implement.
var pipelineUnsupported = map[string]string{
	"identity":   "not supported yet; jobs run with the node's own credentials; remove it",
	"properties": "not supported yet; use tags",
	"services":   "not supported yet (interactive services); remove it",
}

var (
	parentIORE     = regexp.MustCompile(`^\$\{\{\s*parent\.(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$`)
	parentStepOut  = regexp.MustCompile(`^\$\{\{\s*parent\.jobs\.([A-Za-z_][A-Za-z0-9_-]*)\.outputs\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$`)
	stepNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)
	literalInTypes = []string{"integer", "number", "string", "boolean"}
)

// Binding is a pipeline binding: ${{parent.inputs.NAME}} (Step empty,
// Output false), ${{parent.jobs.STEP.outputs.NAME}} (Step set) or
// ${{parent.outputs.NAME}} (Output true).
type Binding struct {
	Step   string
	Name   string
	Output bool
}

// ParseBinding parses a value that is one whole ${{parent...}} binding; ok
// is false for anything else (a plain value, or a binding inside text).
func ParseBinding(v string) (b Binding, ok bool) {
	v = strings.TrimSpace(v)
	if m := parentStepOut.FindStringSubmatch(v); m != nil {
		return Binding{Step: m[1], Name: m[2]}, true
	}
	if m := parentIORE.FindStringSubmatch(v); m != nil {
		return Binding{Name: m[2], Output: m[1] == "outputs"}, true
	}
	return Binding{}, false
}

func (d *decoder) pipeline(root *yaml.Node, j *api.Job) (*api.Job, error) {
	d.mapping(root, "", pipelineFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonField(j, key, v, fp) {
			return true
		}
		switch key {
		case "command":
			j.Command, _ = d.str(v, fp) // checkPipeline refuses one
		case "settings":
			j.Settings = d.pipelineSettings(v, fp)
		case "jobs":
			j.Jobs = map[string]*api.Job{}
			d.mapping(v, fp, nil, func(name string, v *yaml.Node, fp string) bool {
				j.Jobs[name] = d.step(v, fp)
				return true
			})
		default:
			if msg, ok := pipelineUnsupported[key]; ok {
				d.notSupported(fp, msg)
				return true
			}
			if jobStatusFields[key] || key == "steps" {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if len(d.errs) == 0 {
		for _, s := range j.Jobs {
			defaultJob(s)
			s.ExperimentName = ""
		}
	}
	return d.finish(j)
}

func (d *decoder) pipelineSettings(n *yaml.Node, path string) *api.PipelineSettings {
	if isNull(n) {
		return nil
	}
	s := &api.PipelineSettings{}
	d.mapping(n, path, []string{"default_compute", "default_datastore", "continue_on_step_failure", "force_rerun"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "default_compute":
			c, _ := d.str(v, fp)
			s.DefaultCompute = strings.TrimPrefix(strings.TrimSpace(c), "azureml:")
		case "default_datastore":
			ds, _ := d.str(v, fp)
			if ds = strings.TrimSpace(ds); !strings.HasPrefix(ds, "azureml://") {
				ds = strings.TrimPrefix(ds, "azureml:")
			}
			s.DefaultDatastore = ds
		case "continue_on_step_failure":
			s.ContinueOnStepFailure, _ = d.boolean(v, fp)
		case "force_rerun":
			s.ForceRerun, _ = d.boolean(v, fp)
		case "default_environment", "on_init", "on_finalize":
			d.notSupported(fp, "not supported yet; remove it")
		default:
			return false
		}
		return true
	})
	return s
}

// step decodes one pipeline step: a command job, with a component instead
// of a command, and outputs that may bind ${{parent.outputs.X}}.
func (d *decoder) step(n *yaml.Node, path string) *api.Job {
	s := &api.Job{Type: JobTypeCommand}
	d.mapping(n, path, stepFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "type":
			t, _ := d.str(v, fp)
			switch t = strings.ToLower(strings.TrimSpace(t)); {
			case t == JobTypeCommand || t == api.JobTypeSweep:
				s.Type = t
			case t == "parallel" || t == "spark" || t == "automl" || t == "pipeline" || t == "data_transfer" || t == "import":
				d.add(d.lines[fp], fp, "%s steps are not supported yet; tide runs type: command and type: sweep steps", t)
			default:
				d.add(d.lines[fp], fp, "%q is not a step type; tide runs type: command and type: sweep steps", t)
			}
		case "trial":
			s.Trial = d.trial(v, fp)
		case "search_space", "sampling_algorithm", "objective", "early_termination":
			d.sweepSetting(s, key, v, fp)
		case "component":
			rv := resolve(v)
			switch {
			case isNull(rv):
			case rv.Kind == yaml.ScalarNode:
				s.Component = &api.Component{Ref: rv.Value}
			case rv.Kind == yaml.MappingNode:
				s.Component = d.component(rv, fp)
			default:
				d.add(rv.Line, fp, "must be a component file, azureml:NAME:VERSION, or an inline component, got %s", describe(rv))
			}
		case "command":
			s.Command, _ = d.str(v, fp)
		case "code":
			s.Code, _ = d.str(v, fp)
		case "environment":
			s.Environment = d.environment(v, fp)
		case "environment_variables":
			s.EnvironmentVariables = d.strMap(v, fp)
		case "inputs":
			s.Inputs = d.inputs(v, fp)
		case "outputs":
			s.Outputs = d.stepOutputs(v, fp)
		case "compute":
			s.Compute, _ = d.str(v, fp)
		case "resources":
			s.Resources = d.resources(v, fp)
		case "distribution":
			s.Distribution = d.distribution(v, fp)
		case "limits":
			s.Limits = d.limits(v, fp, true) // checkStep refuses trial limits on a command step
		case "display_name":
			s.DisplayName, _ = d.str(v, fp)
		case "description":
			s.Description, _ = d.str(v, fp)
		case "tags":
			s.Tags = d.strMap(v, fp)
		case "name":
			// A step's name is its key under jobs; a round-tripped
			// document carries it empty.
			if n, _ := d.str(v, fp); n != "" {
				d.notSupported(fp, "a step's name is its key under jobs; remove it")
			}
		default:
			if msg, ok := jobUnsupported[key]; ok {
				d.notSupported(fp, msg)
				return true
			}
			return false
		}
		return true
	})
	return s
}

// stepOutputs decodes a step's outputs: a mapping like a job's, or a
// ${{parent.outputs.X}} binding.
func (d *decoder) stepOutputs(n *yaml.Node, path string) map[string]api.JobOutput {
	if isNull(n) {
		return nil
	}
	out := map[string]api.JobOutput{}
	d.mapping(n, path, nil, func(name string, v *yaml.Node, fp string) bool {
		if rv := resolve(v); rv.Kind == yaml.ScalarNode && !isNull(rv) {
			d.ioName(name, fp)
			out[name] = api.JobOutput{Bind: rv.Value}
			return true
		}
		wrap := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: name}, v}}
		for k, o := range d.outputs(wrap, path) {
			out[k] = o
		}
		return true
	})
	return out
}

// checkPipeline checks a pipeline job: its own inputs and outputs, each
// step, every binding, and that the steps form no cycle. Steps whose
// component is still a reference (azureml:NAME:VERSION) are checked for
// what they bind; the server checks them in full once it has resolved the
// reference.
func checkPipeline(j *api.Job, bad func(field, format string, args ...any)) {
	if strings.TrimSpace(j.Command) != "" || j.Code != "" || j.Environment != nil || j.Resources != nil || j.Distribution != nil || j.Limits != nil || j.Component != nil {
		bad("command", "a pipeline job runs its jobs: steps; move command, code, environment, resources, distribution, limits and component into a step")
	}
	if j.QueueSettings != nil {
		bad("queue_settings", "set queue_settings on the steps' computes; not supported on a pipeline yet")
	}
	if j.Compute != "" {
		if msg := computeNameProblem(j.Compute); msg != "" {
			bad("compute", "%s", msg)
		}
	}
	if s := j.Settings; s != nil && s.DefaultCompute != "" {
		if msg := computeNameProblem(s.DefaultCompute); msg != "" {
			bad("settings.default_compute", "%s", msg)
		}
	}
	if s := j.Settings; s != nil && s.DefaultDatastore != "" && !datastoreNameRE.MatchString(s.DefaultDatastore) {
		bad("settings.default_datastore", "%q: name a datastore, as in azureml:workspaceblobstore", s.DefaultDatastore)
	}
	for _, name := range sortedNames(j.Inputs) {
		in := j.Inputs[name]
		if api.IsDataType(in.Type) {
			if strings.TrimSpace(in.Path) == "" {
				bad("inputs."+name+".path", "required for a %s input (a local path, an http(s) URL or a data reference)", in.Type)
			} else if _, problem := ClassifyDataPath(in.Path); problem != "" {
				bad("inputs."+name+".path", "%s", problem)
			}
		} else if in.Type != api.InputLiteral && in.Type != "" {
			bad("inputs."+name+".type", "unknown input type %q; use %s, or a literal value", in.Type, dataTypesText)
		}
	}
	for _, name := range sortedNames(j.Outputs) {
		o := j.Outputs[name]
		if o.Path != "" {
			if _, problem := ClassifyDataPath(o.Path); problem != "" {
				bad("outputs."+name+".path", "%s", problem)
			}
		}
		if o.Type != "" && !api.IsDataType(o.Type) {
			bad("outputs."+name+".type", "unknown output type %q; use %s", o.Type, dataTypesText)
		}
		if o.Mode != "" && !slices.Contains(outputModes, o.Mode) {
			bad("outputs."+name+".mode", "must be one of %s, got %q", strings.Join(outputModes, ", "), o.Mode)
		}
	}
	if len(j.Jobs) == 0 {
		bad("jobs", "required: the pipeline's steps, e.g. jobs: {train: {type: command, component: ./train.yml}}")
		return
	}
	for _, name := range sortedNames(j.Jobs) {
		if !stepNameRE.MatchString(name) {
			bad("jobs."+name, "step name %q must be letters, digits and '_', not starting with a digit", name)
		}
		checkStep(j, name, bad)
	}
	if _, err := StepOrder(j); err != nil {
		bad("jobs", "%s", err.(*FieldError).Message)
	}
}

// checkStep checks one step and its bindings.
func checkStep(p *api.Job, name string, bad func(field, format string, args ...any)) {
	s, prefix := p.Jobs[name], "jobs."+name+"."
	if s == nil {
		bad("jobs."+name, "must be a step: a mapping with type: command and a component or a command")
		return
	}
	c := StepComponent(s)
	switch {
	case s.Type == api.JobTypeSweep:
		if !checkSweepStep(s, prefix, bad) {
			return
		}
	case s.Type != "" && s.Type != JobTypeCommand:
		bad(prefix+"type", "%q steps are not supported yet; tide runs type: command and type: sweep steps", s.Type)
	case s.Trial != nil || len(s.SearchSpace) > 0 || s.Sampling != nil || s.Objective != nil || s.EarlyTermination != nil:
		bad(prefix+"type", "trial, search_space, sampling_algorithm, objective and early_termination belong to sweep steps; set type: sweep")
	case s.Limits != nil && s.Limits.MaxTotalTrials+s.Limits.MaxConcurrentTrials+s.Limits.TrialTimeout != 0:
		bad(prefix+"limits", "max_total_trials, max_concurrent_trials and trial_timeout belong to sweep steps; set type: sweep")
	}
	switch {
	case c != nil && strings.TrimSpace(s.Command) != "":
		bad(prefix+"command", "a step runs either a component or a command; remove one")
		return
	case c == nil && strings.TrimSpace(s.Command) == "":
		bad(prefix+"component", "required: a component (./file.yml, azureml:NAME:VERSION or inline) or a command")
		return
	case c != nil && c.Ref != "":
		if _, ok := ComponentFile(c.Ref); ok {
			return // the CLI reads it; the server refuses one that reaches it unread
		}
		if _, err := ParseComponentRef(c.Ref); err != nil {
			bad(prefix+"component", "%s", err.(*FieldError).Message)
		}
	case c != nil:
		if c.Code != "" && s.Code != "" || c.Environment != nil && s.Environment != nil {
			bad(prefix+"code", "code and environment come from the step's component; remove them from the step")
		}
		checkComponent(c, prefix+"component.", bad)
	}
	// An inline command is a command job whose bound inputs get their
	// values when the step starts.
	if c == nil {
		body := *s
		body.Inputs = map[string]api.JobInput{}
		for k, in := range s.Inputs {
			if _, ok := ParseBinding(in.Value); ok && in.Type == api.InputLiteral {
				in = api.JobInput{Type: api.InputLiteral, Value: "bound"}
			}
			body.Inputs[k] = in
		}
		body.Outputs = map[string]api.JobOutput{}
		for k, o := range s.Outputs {
			body.Outputs[k] = api.JobOutput{Type: o.Type, Mode: o.Mode}
		}
		body.Compute = ""
		checkJobBody(&body, func(field, format string, args ...any) { bad(prefix+field, format, args...) })
	}
	if s.Compute != "" {
		if msg := computeNameProblem(strings.TrimPrefix(s.Compute, "azureml:")); msg != "" {
			bad(prefix+"compute", "%s", msg)
		}
	}
	declared := c != nil && c.Ref == ""
	for _, in := range sortedNames(s.Inputs) {
		v, fp := s.Inputs[in], prefix+"inputs."+in
		var decl api.ComponentInput
		if declared {
			var ok bool
			if decl, ok = c.Inputs[in]; !ok {
				bad(fp, "component %s declares no input %s; its inputs: %s", componentLabel(c, name), in, strings.Join(sortedNames(c.Inputs), ", "))
				continue
			}
		}
		b, isBinding := ParseBinding(v.Value)
		if v.Type != api.InputLiteral || !isBinding {
			if strings.Contains(v.Value, "${{") {
				bad(fp, "%q: a binding must be the whole value: ${{parent.inputs.NAME}} or ${{parent.jobs.STEP.outputs.NAME}}", v.Value)
				continue
			}
			if declared {
				checkGiven(decl, v, fp, bad)
			}
			continue
		}
		switch {
		case b.Output:
			bad(fp, "%s binds a pipeline output; inputs bind ${{parent.inputs.NAME}} or ${{parent.jobs.STEP.outputs.NAME}}", v.Value)
		case b.Step == "":
			pin, ok := p.Inputs[b.Name]
			if !ok {
				bad(fp, "%s: the pipeline has no input %s; add inputs.%s to the pipeline", v.Value, b.Name, b.Name)
			} else if declared {
				checkGiven(decl, pin, fp, bad)
			}
		default:
			src, ok := p.Jobs[b.Step]
			if !ok {
				bad(fp, "%s: the pipeline has no step %s; steps: %s", v.Value, b.Step, strings.Join(sortedNames(p.Jobs), ", "))
				continue
			}
			if b.Step == name {
				bad(fp, "%s: a step cannot take its own output", v.Value)
				continue
			}
			outType, known := StepOutputType(src, b.Name)
			if !known {
				bad(fp, "%s: step %s has no output %s", v.Value, b.Step, b.Name)
				continue
			}
			if declared && outType != "" && decl.Type != outType {
				bad(fp, "%s is a %s output but input %s of component %s is %s", v.Value, outType, in, componentLabel(c, name), decl.Type)
			}
		}
	}
	if declared {
		for _, in := range sortedNames(c.Inputs) {
			decl := c.Inputs[in]
			_, swept := s.SearchSpace[in]
			if _, given := s.Inputs[in]; !given && !swept && decl.Default == nil && !decl.Optional {
				bad(prefix+"inputs."+in, "required by component %s (a %s input with no default); give it under jobs.%s.inputs", componentLabel(c, name), decl.Type, name)
			}
		}
	}
	for _, out := range sortedNames(s.Outputs) {
		o, fp := s.Outputs[out], prefix+"outputs."+out
		if declared {
			if _, ok := c.Outputs[out]; !ok {
				bad(fp, "component %s declares no output %s; its outputs: %s", componentLabel(c, name), out, strings.Join(sortedNames(c.Outputs), ", "))
				continue
			}
		}
		if o.Bind == "" {
			if o.Path != "" {
				if _, problem := ClassifyDataPath(o.Path); problem != "" {
					bad(fp+".path", "%s", problem)
				}
			}
			continue
		}
		b, ok := ParseBinding(o.Bind)
		if !ok || !b.Output {
			bad(fp, "%q: an output binds ${{parent.outputs.NAME}}, or is a mapping with mode and type", o.Bind)
			continue
		}
		if _, ok := p.Outputs[b.Name]; !ok {
			bad(fp, "%s: the pipeline has no output %s; add outputs.%s to the pipeline", o.Bind, b.Name, b.Name)
		}
	}
}

// checkGiven checks a value given to a declared component input.
func checkGiven(decl api.ComponentInput, v api.JobInput, fp string, bad func(field, format string, args ...any)) {
	switch {
	case v.Type == api.InputLiteral && slices.Contains(literalInTypes, decl.Type):
		if msg := LiteralProblem(decl, v.Value); msg != "" {
			bad(fp, "%s", msg)
		}
	case v.Type == api.InputLiteral:
		bad(fp, "%q: input is %s: give data (type and path) or a step's output", v.Value, decl.Type)
	case slices.Contains(literalInTypes, decl.Type):
		bad(fp, "input is %s, a value, but the step gives %s data", decl.Type, v.Type)
	case v.Type != decl.Type:
		bad(fp, "input is %s but the step gives %s", decl.Type, v.Type)
	}
}

func componentLabel(c *api.Component, step string) string {
	if c.Name != "" {
		return c.Name
	}
	return "of step " + step
}

// StepOutputType returns the type of a step's output NAME (uri_folder
// when not declared) and whether the step has it. A step whose component
// is an unresolved reference has every output, of unknown type ("").
func StepOutputType(s *api.Job, name string) (string, bool) {
	if c := StepComponent(s); c != nil {
		if c.Ref != "" {
			return "", true
		}
		o, ok := c.Outputs[name]
		return cmpOr(o.Type, DefaultOutputType), ok
	}
	o, ok := s.Outputs[name]
	return cmpOr(o.Type, DefaultOutputType), ok
}

// StepComponent is the component a step runs: a sweep step's trial, or
// the step's own (nil for an inline command).
func StepComponent(s *api.Job) *api.Component {
	if s.Type == api.JobTypeSweep {
		if s.Trial == nil {
			return nil
		}
		return s.Trial.Component
	}
	return s.Component
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// StepDependencies returns, for each step, the steps whose outputs it
// takes, sorted.
func StepDependencies(p *api.Job) map[string][]string {
	deps := map[string][]string{}
	for name, s := range p.Jobs {
		deps[name] = nil
		if s == nil {
			continue
		}
		for _, in := range s.Inputs {
			if b, ok := ParseBinding(in.Value); ok && b.Step != "" && !slices.Contains(deps[name], b.Step) {
				if _, exists := p.Jobs[b.Step]; exists && b.Step != name {
					deps[name] = append(deps[name], b.Step)
				}
			}
		}
		slices.Sort(deps[name])
	}
	return deps
}

// StepOrder orders the steps so each comes after the steps it depends on
// (ties by name), or fails naming a cycle.
func StepOrder(p *api.Job) ([]string, error) {
	deps := StepDependencies(p)
	var order []string
	done := map[string]bool{}
	for len(order) < len(deps) {
		progressed := false
		for _, name := range sortedNames(deps) {
			if done[name] {
				continue
			}
			ready := true
			for _, d := range deps[name] {
				ready = ready && done[d]
			}
			if ready {
				done[name], progressed = true, true
				order = append(order, name)
			}
		}
		if !progressed {
			var cycle []string
			for _, name := range sortedNames(deps) {
				if !done[name] {
					cycle = append(cycle, name)
				}
			}
			return nil, &FieldError{Field: "jobs", Message: errorf("steps %s depend on each other in a cycle; a step can only take outputs of steps that do not need its own", strings.Join(cycle, ", "))}
		}
	}
	return order, nil
}
