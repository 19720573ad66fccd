package sweep

import (
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
	if s.Limits != nil && s.Limits.TrialTimeout > 0 {
		j.Limits = &api.JobLimits{Timeout: s.Limits.TrialTimeout}
	}
	return j
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
