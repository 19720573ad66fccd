package sweep

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// TrialJob returns the command job trial index of sweep s runs as: the
// trial's command with its ${{search_space.X}} bindings replaced by
// params, its code, environment and shape, the sweep's inputs, outputs
// and compute, and limits.trial_timeout as its timeout. It leaves Name
// empty and sets Parent and Parameters.
func TrialJob(s *api.Job, index int, params map[string]string) *api.Job {
	t := s.Trial
	j := &api.Job{
		Type: api.JobTypeCommand, DisplayName: fmt.Sprintf("%s trial %d", s.DisplayName, index),
		ExperimentName: s.ExperimentName, Description: s.Description, Tags: maps.Clone(s.Tags),
		Command: spec.BindSearchSpace(t.Command, params), Code: t.Code, Environment: t.Environment,
		EnvironmentVariables: maps.Clone(t.EnvironmentVariables), Inputs: maps.Clone(s.Inputs),
		Outputs: maps.Clone(s.Outputs), Compute: s.Compute, Resources: t.Resources,
		Distribution: t.Distribution, Tide: s.Tide, Parent: s.Name, Parameters: maps.Clone(params),
	}
	if c := t.Component; c != nil {
		componentTrial(j, c, params)
	}
	if s.Limits != nil && s.Limits.TrialTimeout > 0 {
		j.Limits = &api.JobLimits{Timeout: s.Limits.TrialTimeout}
	}
	return j
}

// componentTrial makes j run component c: its command, code, environment
// and shape, its inputs from the sweep's inputs, the trial's parameters (by
// input name) and the component's defaults, its outputs as it declares them
// (a mode given in the sweep's outputs wins).
func componentTrial(j *api.Job, c *api.Component, params map[string]string) {
	j.Command, j.Code, j.Environment = c.Command, c.Code, c.Environment
	j.EnvironmentVariables = maps.Clone(c.EnvironmentVariables)
	j.Resources, j.Distribution = c.Resources, c.Distribution
	given := j.Inputs
	j.Inputs = map[string]api.JobInput{}
	for name, decl := range c.Inputs {
		if decl.Default != nil {
			j.Inputs[name] = api.JobInput{Type: api.InputLiteral, Value: *decl.Default}
		}
	}
	maps.Copy(j.Inputs, given)
	for name, v := range params {
		j.Inputs[name] = api.JobInput{Type: api.InputLiteral, Value: v}
	}
	outs := map[string]api.JobOutput{}
	for name, decl := range c.Outputs {
		o := api.JobOutput{Type: cmp.Or(decl.Type, spec.DefaultOutputType), Mode: cmp.Or(decl.Mode, spec.DefaultOutputMode)}
		if so, ok := j.Outputs[name]; ok && so.Mode != "" {
			o.Mode = so.Mode
		}
		outs[name] = o
	}
	j.Outputs = outs
	if len(j.Outputs) == 0 {
		j.Outputs = nil
	}
}

// FormatParams writes a trial's parameters as name=value, sorted.
func FormatParams(params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+params[k])
	}
	return strings.Join(parts, " ")
}
