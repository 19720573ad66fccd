// Package pipeline holds the decisions of pipeline jobs, apart from their
// effects: which steps start, which are skipped or canceled, what the
// pipeline's status becomes (Decide), and the command job a step runs as,
// with its bindings resolved (StepJob). The service applies them.
package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// OutputRef returns a reference to what step wrote to its output out, as
// a blob the next step's node fetches ("blob:HEX", or "blob:HEX/FILE"
// when file is set: the one file of the output).
type OutputRef func(step, out string, file bool) (string, error)

// StepJob returns the command job step name of pipeline p runs as: the
// component's (or the step's inline) command, code and environment, with
// every input bound: pipeline inputs copied, step outputs as blob
// references from ref, component defaults filled in. It leaves Name empty
// and sets Parent, Step and ReuseKey. A sweep step runs as a sweep job
// (sweepStep).
func StepJob(p *api.Job, name string, ref OutputRef) (*api.Job, error) {
	s := p.Jobs[name]
	if s == nil {
		return nil, fmt.Errorf("pipeline %s has no step %s", p.Name, name)
	}
	j := &api.Job{
		Type: api.JobTypeCommand, DisplayName: s.DisplayName, ExperimentName: p.ExperimentName,
		Description: s.Description, Tags: s.Tags, Compute: s.Compute, Limits: s.Limits,
		Parent: p.Name, Step: name, Inputs: map[string]api.JobInput{}, Outputs: map[string]api.JobOutput{},
	}
	if j.DisplayName == "" {
		j.DisplayName = name
	}
	c := spec.StepComponent(s)
	if c != nil && c.Ref != "" {
		return nil, fmt.Errorf("step %s: component %s was not resolved", name, c.Ref)
	}
	if c != nil {
		j.Command, j.Code, j.Environment = c.Command, c.Code, c.Environment
		j.EnvironmentVariables = merge(c.EnvironmentVariables, s.EnvironmentVariables)
		j.Distribution, j.Resources = c.Distribution, c.Resources
	} else {
		j.Command, j.Code, j.Environment = s.Command, s.Code, s.Environment
		j.EnvironmentVariables = merge(nil, s.EnvironmentVariables)
	}
	if s.Distribution != nil {
		j.Distribution = s.Distribution
	}
	if s.Resources != nil {
		j.Resources = s.Resources
	}
	for in, v := range s.Inputs {
		var decl *api.ComponentInput
		if c != nil {
			d := c.Inputs[in]
			decl = &d
		}
		bound, err := bindInput(p, name, in, v, decl, ref)
		if err != nil {
			return nil, err
		}
		j.Inputs[in] = bound
	}
	if c != nil {
		for in, decl := range c.Inputs {
			_, swept := s.SearchSpace[in]
			if _, given := j.Inputs[in]; given || swept || decl.Default == nil {
				continue
			}
			j.Inputs[in] = api.JobInput{Type: api.InputLiteral, Value: *decl.Default}
		}
		for out, decl := range c.Outputs {
			o := api.JobOutput{Type: decl.Type, Mode: decl.Mode}
			if so, ok := s.Outputs[out]; ok && so.Bind == "" && so.Mode != "" {
				o.Mode = so.Mode
			}
			o.Path = OutputPath(p, s.Outputs[out])
			j.Outputs[out] = withDefaults(o)
		}
	} else {
		for out, so := range s.Outputs {
			j.Outputs[out] = withDefaults(api.JobOutput{Type: so.Type, Mode: so.Mode, Path: OutputPath(p, so)})
		}
	}
	if len(j.Inputs) == 0 {
		j.Inputs = nil
	}
	if len(j.Outputs) == 0 {
		j.Outputs = nil
	}
	if s.Type == api.JobTypeSweep {
		return sweepStep(j, s, c), nil
	}
	key, err := reuseKey(j)
	if err != nil {
		return nil, err
	}
	j.ReuseKey = key
	return j, nil
}

// sweepStep turns j, the command job of a sweep step's component with its
// inputs bound, into the sweep job the step runs as: its trials run the
// component (with the step's variables and shape) and get the search
// space's values for the inputs it names. It has no reuse key: every run
// samples anew.
func sweepStep(j, s *api.Job, c *api.Component) *api.Job {
	trial := *c
	trial.EnvironmentVariables, trial.Resources, trial.Distribution = j.EnvironmentVariables, j.Resources, j.Distribution
	sampling := *s.Sampling
	return &api.Job{
		Type: api.JobTypeSweep, DisplayName: j.DisplayName, ExperimentName: j.ExperimentName,
		Description: j.Description, Tags: j.Tags, Compute: j.Compute, Parent: j.Parent, Step: j.Step,
		Inputs: j.Inputs, Outputs: j.Outputs, Trial: &api.Job{Type: api.JobTypeCommand, Component: &trial},
		SearchSpace: s.SearchSpace, Sampling: &sampling, Objective: s.Objective, Limits: s.Limits,
		EarlyTermination: s.EarlyTermination,
	}
}

// OutputPath is where a step's output is written besides being handed
// on: the step's path, else the path of the pipeline output it binds,
// else Azure's default path in settings.default_datastore, else nowhere
// (it is kept with the step's job only).
func OutputPath(p *api.Job, so api.JobOutput) string {
	if so.Path != "" {
		return so.Path
	}
	if b, ok := spec.ParseBinding(so.Bind); ok && b.Output && p.Outputs[b.Name].Path != "" {
		return p.Outputs[b.Name].Path
	}
	if p.Settings != nil && p.Settings.DefaultDatastore != "" {
		return spec.DefaultOutputPath(p.Settings.DefaultDatastore)
	}
	return ""
}

func withDefaults(o api.JobOutput) api.JobOutput {
	if o.Type == "" {
		o.Type = spec.DefaultOutputType
	}
	if o.Mode == "" {
		o.Mode = spec.DefaultOutputMode
	}
	return o
}

func merge(a, b map[string]string) map[string]string {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// bindInput resolves one step input.
func bindInput(p *api.Job, step, in string, v api.JobInput, decl *api.ComponentInput, ref OutputRef) (api.JobInput, error) {
	b, ok := spec.ParseBinding(v.Value)
	if v.Type != api.InputLiteral || !ok {
		return v, nil
	}
	if b.Step == "" {
		pin, ok := p.Inputs[b.Name]
		if !ok {
			return api.JobInput{}, fmt.Errorf("jobs.%s.inputs.%s: the pipeline has no input %s", step, in, b.Name)
		}
		return pin, nil
	}
	typ, _ := spec.StepOutputType(p.Jobs[b.Step], b.Name)
	if decl != nil && decl.Type != "" {
		typ = decl.Type
	}
	if typ == "" {
		typ = api.InputURIFolder
	}
	path, err := ref(b.Step, b.Name, typ == api.InputURIFile)
	if err != nil {
		return api.JobInput{}, fmt.Errorf("jobs.%s.inputs.%s: output %s of step %s: %w", step, in, b.Name, b.Step, err)
	}
	return api.JobInput{Type: typ, Path: path, Mode: spec.DefaultInputMode}, nil
}

// reuseKey hashes what a step job computes from: its command, code,
// environment, variables, inputs (data by content: blob references name
// their content), outputs and shape. The compute is left out, as in Azure:
// the same work on another cluster gives the same outputs.
func reuseKey(j *api.Job) (string, error) {
	b, err := json.Marshal(struct {
		Command      string
		Code         string
		Environment  *api.JobEnvironment
		Variables    map[string]string
		Inputs       map[string]api.JobInput
		Outputs      map[string]api.JobOutput
		Distribution *api.Distribution
		Resources    *api.JobResources
	}{j.Command, j.Code, j.Environment, j.EnvironmentVariables, j.Inputs, j.Outputs, j.Distribution, j.Resources})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
