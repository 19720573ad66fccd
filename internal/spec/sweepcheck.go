package spec

import (
	"math"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/runmetrics"
)

// checkSweep checks a sweep job: its trial (a command job whose inputs and
// outputs are the sweep's), the search space and every binding to it, the
// sampling algorithm, the objective, the limits and the early termination
// policy.
func checkSweep(j *api.Job, bad func(field, format string, args ...any)) {
	if strings.TrimSpace(j.Command) != "" || j.Code != "" || j.Environment != nil || j.Resources != nil || j.Distribution != nil || len(j.Jobs) > 0 || j.Component != nil {
		bad("command", "a sweep runs its trial:; move command, code, environment, resources and distribution under trial:")
	}
	if j.QueueSettings != nil {
		bad("queue_settings", "not supported on a sweep yet; set it on the compute")
	}
	t := j.Trial
	switch {
	case t == nil:
		bad("trial", "required: the command each trial runs, e.g. trial: {command: python train.py --lr ${{search_space.lr}}, code: src, environment: ...}")
	case t.Component != nil:
		if strings.TrimSpace(t.Command) != "" || t.Code != "" || t.Environment != nil {
			bad("trial", "a trial is a component or a command, not both; remove command, code and environment")
		}
		checkComponentTrial(j, bad)
	default:
		body := *t
		body.Inputs, body.Outputs, body.Compute = j.Inputs, j.Outputs, j.Compute
		placeholders := map[string]string{}
		for _, name := range SearchSpaceRefs(t.Command) {
			if _, ok := j.SearchSpace[name]; !ok {
				bad("trial.command", "${{search_space.%s}} is not in the search space; add search_space.%s or remove the reference", name, name)
			}
			placeholders[name] = "1"
		}
		body.Command = BindSearchSpace(t.Command, placeholders)
		checkJobBody(&body, func(field, format string, args ...any) {
			if strings.HasPrefix(field, "inputs.") || strings.HasPrefix(field, "outputs.") || field == "compute" {
				bad(field, format, args...)
				return
			}
			bad("trial."+field, format, args...)
		})
		for _, name := range sortedNames(j.SearchSpace) {
			if !slices.Contains(SearchSpaceRefs(t.Command), name) {
				bad("search_space."+name, "the trial does not use it; bind it in trial.command with ${{search_space.%s}} or remove it", name)
			}
		}
	}
	checkSweepSettings(j, bad)
}

// checkSweepSettings checks what a sweep job and a sweep step share: the
// search space, the sampling algorithm, the objective, the limits and the
// early termination policy.
func checkSweepSettings(j *api.Job, bad func(field, format string, args ...any)) {
	if len(j.SearchSpace) == 0 {
		bad("search_space", "required: the parameters to sweep, e.g. search_space: {lr: {type: loguniform, min_value: -6, max_value: -1}}")
	}
	for _, name := range sortedNames(j.SearchSpace) {
		checkDist(j.SearchSpace[name], "search_space."+name, bad)
	}
	checkSampling(j, bad)
	switch o := j.Objective; {
	case o == nil:
		bad("objective", "required: the metric the trials log and whether to maximize or minimize it, e.g. objective: {primary_metric: accuracy, goal: maximize}")
	default:
		if o.PrimaryMetric == "" {
			bad("objective.primary_metric", "required: the name of the metric the trials log (print(\"##tide metric NAME=VALUE\") or mlflow.log_metric)")
		} else if !runmetrics.ValidName(o.PrimaryMetric) {
			bad("objective.primary_metric", "%q is not a metric name: letters, digits, '_', '.', '-' and '/'", o.PrimaryMetric)
		}
		if o.Goal != api.GoalMaximize && o.Goal != api.GoalMinimize {
			bad("objective.goal", "must be maximize or minimize, got %q", o.Goal)
		}
	}
	if l := j.Limits; l != nil {
		for _, f := range []struct {
			name string
			v    int
		}{{"timeout", l.Timeout}, {"max_total_trials", l.MaxTotalTrials}, {"max_concurrent_trials", l.MaxConcurrentTrials}, {"trial_timeout", l.TrialTimeout}} {
			if f.v < 0 {
				bad("limits."+f.name, "must be >= 1 (got %d)", f.v)
			}
		}
	}
	checkEarlyTermination(j.EarlyTermination, bad)
}

// checkComponentTrial checks a sweep whose trial is a component: its
// search space parameters and inputs are the component's inputs (by name),
// which must all be given unless they have a default or are optional. A
// reference the CLI reads (./file.yml) or the server resolves
// (azureml:NAME:VERSION) is checked once it is inline.
func checkComponentTrial(j *api.Job, bad func(field, format string, args ...any)) {
	c := j.Trial.Component
	if c.Ref != "" {
		if _, ok := ComponentFile(c.Ref); !ok {
			if _, err := ParseComponentRef(c.Ref); err != nil {
				bad("trial", "%s", err.(*FieldError).Message)
			}
		}
		return
	}
	checkComponent(c, "trial.", bad)
	label := componentLabel(c, "trial")
	declared := strings.Join(sortedNames(c.Inputs), ", ")
	checkSwept(j, c, label, bad)
	for _, name := range sortedNames(j.Inputs) {
		decl, ok := c.Inputs[name]
		if !ok {
			bad("inputs."+name, "component %s declares no input %s; its inputs: %s", label, name, declared)
			continue
		}
		checkGiven(decl, j.Inputs[name], "inputs."+name, bad)
	}
	for _, name := range sortedNames(c.Inputs) {
		decl := c.Inputs[name]
		_, given := j.Inputs[name]
		_, swept := j.SearchSpace[name]
		if !given && !swept && decl.Default == nil && !decl.Optional {
			bad("inputs."+name, "required by component %s (a %s input with no default); give it under inputs or search_space", label, decl.Type)
		}
	}
	for _, name := range sortedNames(j.Outputs) {
		if _, ok := c.Outputs[name]; !ok {
			bad("outputs."+name, "component %s declares no output %s; its outputs: %s", label, name, strings.Join(sortedNames(c.Outputs), ", "))
		}
	}
}

// checkSwept checks that each search space parameter of j (a sweep job or
// step) is a literal input of component c that its values fit, and not
// given as an input too.
func checkSwept(j *api.Job, c *api.Component, label string, bad func(field, format string, args ...any)) {
	declared := strings.Join(sortedNames(c.Inputs), ", ")
	for _, name := range sortedNames(j.SearchSpace) {
		decl, ok := c.Inputs[name]
		sd, fp := j.SearchSpace[name], "search_space."+name
		switch {
		case !ok:
			bad(fp, "component %s has no input %s; a component trial's parameters are its inputs: %s", label, name, declared)
		case !slices.Contains(literalInTypes, decl.Type):
			bad(fp, "input %s of component %s is %s data; search space parameters are values", name, label, decl.Type)
		case decl.Type == "integer" && sd.Type != api.DistChoice && sd.Type != api.DistRandint && (sd.Q == nil || *sd.Q != math.Trunc(*sd.Q)):
			bad(fp, "input %s of component %s is an integer, but a %s distribution gives fractions; use randint, choice or a q distribution with a whole q", name, label, sd.Type)
		case sd.Type == api.DistChoice:
			for _, v := range sd.Values {
				if msg := LiteralProblem(decl, v); msg != "" {
					bad(fp+".values", "%s", msg)
				}
			}
		}
		if _, both := j.Inputs[name]; both {
			bad("inputs."+name, "%s is a search space parameter; remove it from inputs", name)
		}
	}
}

// checkSweepStep checks the sweep parts of a pipeline's sweep step: a
// component trial and the sweep settings; checkStep checks its inputs and
// outputs against the component. It reports whether the step has a
// component to check them against.
func checkSweepStep(s *api.Job, prefix string, bad func(field, format string, args ...any)) bool {
	pbad := func(field, format string, args ...any) { bad(prefix+field, format, args...) }
	if s.Component != nil || strings.TrimSpace(s.Command) != "" || s.Code != "" || s.Environment != nil {
		pbad("component", "a sweep step runs its trial:; put the component there (trial: ./train.yml)")
	}
	checkSweepSettings(s, pbad)
	switch t := s.Trial; {
	case t == nil:
		pbad("trial", "required: the component each trial runs, e.g. trial: ./train.yml")
		return false
	case t.Component != nil && (strings.TrimSpace(t.Command) != "" || t.Code != "" || t.Environment != nil):
		pbad("trial", "a trial is a component or a command, not both; remove command, code and environment")
		return false
	case t.Component == nil:
		pbad("trial", "a sweep step's trial is a component (./file.yml, azureml:NAME:VERSION or inline), as in Azure; move the command into a component file")
		return false
	case t.Component.Ref == "":
		checkSwept(s, t.Component, componentLabel(t.Component, "trial"), pbad)
	}
	return true
}

func checkSampling(j *api.Job, bad func(field, format string, args ...any)) {
	s := j.Sampling
	if s == nil {
		bad("sampling_algorithm", "required: random, grid or bayesian")
		return
	}
	switch s.Type {
	case api.SamplingRandom:
	case api.SamplingGrid:
		for _, name := range sortedNames(j.SearchSpace) {
			if t := j.SearchSpace[name].Type; t != api.DistChoice && t != api.DistRandint && distFields[t] != nil {
				bad("search_space."+name, "grid sampling needs a finite set of values, but %s is a continuous %s distribution; use type: choice with the values to try, or sampling_algorithm: random", name, t)
			}
		}
	case api.SamplingBayesian:
	case "":
		bad("sampling_algorithm.type", "required: random, grid or bayesian")
	default:
		bad("sampling_algorithm", "%q is not a sampling algorithm; use random, grid or bayesian", s.Type)
	}
	if s.Seed != nil && s.Type == api.SamplingGrid {
		bad("sampling_algorithm.seed", "grid sampling takes no seed: it tries every point in order")
	}
}

func checkEarlyTermination(et *api.EarlyTermination, bad func(field, format string, args ...any)) {
	if et == nil {
		return
	}
	const fp = "early_termination."
	switch et.Type {
	case api.PolicyBandit:
		switch {
		case et.SlackFactor == nil && et.SlackAmount == nil:
			bad(fp+"slack_factor", "a bandit policy needs slack_factor (a ratio, e.g. 0.1) or slack_amount (in the metric's units)")
		case et.SlackFactor != nil && et.SlackAmount != nil:
			bad(fp+"slack_amount", "give slack_factor or slack_amount, not both")
		case et.SlackFactor != nil && *et.SlackFactor < 0:
			bad(fp+"slack_factor", "must be >= 0, got %g", *et.SlackFactor)
		case et.SlackAmount != nil && *et.SlackAmount < 0:
			bad(fp+"slack_amount", "must be >= 0, got %g", *et.SlackAmount)
		}
	case api.PolicyMedian:
	case api.PolicyTruncation:
		if et.TruncationPercentage < 1 || et.TruncationPercentage > 99 {
			bad(fp+"truncation_percentage", "required: the percentage of the worst trials to stop at each evaluation, 1 to 99 (got %d)", et.TruncationPercentage)
		}
	case "":
		bad(fp+"type", "required: bandit, median_stopping or truncation_selection")
		return
	default:
		bad(fp+"type", "%q is not a policy; use bandit, median_stopping or truncation_selection", et.Type)
		return
	}
	if et.EvaluationInterval < 0 {
		bad(fp+"evaluation_interval", "must be >= 1, got %d", et.EvaluationInterval)
	}
	if et.DelayEvaluation < 0 {
		bad(fp+"delay_evaluation", "must be >= 0, got %d", et.DelayEvaluation)
	}
}
