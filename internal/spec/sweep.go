package spec

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/runmetrics"
)

var sweepFields = []string{
	"$schema", "type", "name", "display_name", "experiment_name", "description", "tags",
	"trial", "inputs", "outputs", "compute", "search_space", "sampling_algorithm", "objective",
	"limits", "early_termination", "tide",
}

var trialFields = []string{"command", "code", "environment", "environment_variables", "resources", "distribution"}

// sweepMisplaced are command job fields written at a sweep's top level.
var sweepMisplaced = map[string]string{
	"command":               "belongs under trial: (the command each trial runs)",
	"code":                  "belongs under trial:",
	"environment":           "belongs under trial:",
	"environment_variables": "belongs under trial:",
	"resources":             "belongs under trial:",
	"distribution":          "belongs under trial:",
	"queue_settings":        "not supported on a sweep yet; set it on the compute",
	"identity":              "not supported on a sweep yet; remove it",
	"jobs":                  "belongs to pipeline jobs; set type: pipeline",
	"settings":              "belongs to pipeline jobs; set type: pipeline",
}

// distFields are the fields of each distribution type, in the order of
// the expression form's arguments (uniform(min_value, max_value)).
var distFields = map[string][]string{
	api.DistChoice:      {"values"},
	api.DistRandint:     {"upper"},
	api.DistUniform:     {"min_value", "max_value"},
	api.DistLoguniform:  {"min_value", "max_value"},
	api.DistQuniform:    {"min_value", "max_value", "q"},
	api.DistQloguniform: {"min_value", "max_value", "q"},
	api.DistNormal:      {"mu", "sigma"},
	api.DistLognormal:   {"mu", "sigma"},
	api.DistQnormal:     {"mu", "sigma", "q"},
	api.DistQlognormal:  {"mu", "sigma", "q"},
}

const distTypesText = "choice, randint, uniform, loguniform, quniform, qloguniform, normal, lognormal, qnormal or qlognormal"

var (
	searchRefRE = regexp.MustCompile(`^search_space\.([A-Za-z_][A-Za-z0-9_]*)$`)
	exprRE      = regexp.MustCompile(`^\s*([A-Za-z_]+)\s*\((.*)\)\s*$`)
)

func (d *decoder) sweep(root *yaml.Node, j *api.Job) (*api.Job, error) {
	d.mapping(root, "", sweepFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonField(j, key, v, fp) {
			return true
		}
		switch key {
		case "trial":
			j.Trial = d.trial(v, fp)
		case "search_space":
			j.SearchSpace = map[string]api.SearchDist{}
			d.mapping(v, fp, nil, func(name string, v *yaml.Node, fp string) bool {
				d.ioName(name, fp)
				j.SearchSpace[name] = d.searchDist(v, fp)
				return true
			})
		case "sampling_algorithm":
			j.Sampling = d.sampling(v, fp)
		case "objective":
			j.Objective = &api.Objective{}
			d.mapping(v, fp, []string{"primary_metric", "goal"}, func(key string, v *yaml.Node, fp string) bool {
				s, _ := d.str(v, fp)
				switch key {
				case "primary_metric":
					j.Objective.PrimaryMetric = strings.TrimSpace(s)
				case "goal":
					j.Objective.Goal = strings.ToLower(strings.TrimSpace(s))
				default:
					return false
				}
				return true
			})
		case "limits":
			j.Limits = d.limits(v, fp, true)
		case "early_termination":
			j.EarlyTermination = d.earlyTermination(v, fp)
		case "tide":
			j.Tide = d.extensions(v, fp)
		default:
			if msg, ok := sweepMisplaced[key]; ok {
				// A marshalled api.Job (an API body) carries them empty.
				if !isZero(v, 0) {
					d.notSupported(fp, msg)
				}
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

// trial decodes a sweep's trial: a command job without inputs and outputs
// (the sweep's are the trial's), or a component reference.
func (d *decoder) trial(n *yaml.Node, path string) *api.Job {
	rv := resolve(n)
	if isNull(rv) {
		return nil
	}
	t := &api.Job{Type: JobTypeCommand}
	if rv.Kind == yaml.ScalarNode {
		t.Component = &api.Component{Ref: rv.Value}
		return t
	}
	d.mapping(rv, path, trialFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "command":
			t.Command, _ = d.str(v, fp)
		case "code":
			t.Code, _ = d.str(v, fp)
		case "environment":
			t.Environment = d.environment(v, fp)
		case "environment_variables":
			t.EnvironmentVariables = d.strMap(v, fp)
		case "resources":
			t.Resources = d.resources(v, fp)
		case "distribution":
			t.Distribution = d.distribution(v, fp)
		case "component":
			// An API body carries a component trial this way.
			if rv := resolve(v); rv.Kind == yaml.MappingNode {
				t.Component = d.component(rv, fp)
			} else if s, _ := d.str(v, fp); s != "" {
				t.Component = &api.Component{Ref: s}
			}
		case "inputs", "outputs":
			d.notSupported(fp, "a sweep's inputs and outputs are at its top level, beside trial:; move them there")
		case "type":
			if s, _ := d.str(v, fp); s != "" && !strings.EqualFold(s, JobTypeCommand) {
				d.add(d.lines[fp], fp, "a trial is a command; remove type or set it to command")
			}
		default:
			// A marshalled api.Job (an API body) carries the other
			// command job fields empty.
			return isZero(v, 0) && slices.Contains(jobFields, key)
		}
		return true
	})
	return t
}

// searchDist decodes one search space parameter: a mapping with a type
// (Azure's file form) or an expression such as uniform(0.1, 1.0).
func (d *decoder) searchDist(n *yaml.Node, path string) api.SearchDist {
	rv := resolve(n)
	if rv.Kind == yaml.ScalarNode && !isNull(rv) {
		sd, problem := ParseSearchExpr(rv.Value)
		if problem != "" {
			d.add(rv.Line, path, "%s", problem)
		}
		return sd
	}
	sd := api.SearchDist{}
	known := []string{"type", "values", "upper", "min_value", "max_value", "mu", "sigma", "q"}
	given := map[string]bool{}
	d.mapping(rv, path, known, func(key string, v *yaml.Node, fp string) bool {
		given[key] = true
		switch key {
		case "type":
			s, _ := d.str(v, fp)
			sd.Type = strings.ToLower(strings.TrimSpace(s))
		case "values":
			sd.Values = d.choiceValues(v, fp)
		case "upper":
			if u, ok := d.integer(v, fp); ok {
				sd.Upper = &u
			}
		case "min_value":
			sd.MinValue = d.optNumber(v, fp)
		case "max_value":
			sd.MaxValue = d.optNumber(v, fp)
		case "mu":
			sd.Mu = d.optNumber(v, fp)
		case "sigma":
			sd.Sigma = d.optNumber(v, fp)
		case "q":
			sd.Q = d.optNumber(v, fp)
		default:
			return false
		}
		return true
	})
	if fields, ok := distFields[sd.Type]; ok {
		for _, f := range sortedNames(given) {
			if f != "type" && !slices.Contains(fields, f) {
				d.add(d.lines[path+"."+f], path+"."+f, "not a field of a %s distribution; it has %s", sd.Type, strings.Join(fields, ", "))
			}
		}
	}
	return sd
}

func (d *decoder) choiceValues(n *yaml.Node, path string) []string {
	rv := resolve(n)
	if rv.Kind != yaml.SequenceNode {
		d.add(rv.Line, path, "must be a list of values, e.g. [0.01, 0.1, 1], got %s", describe(rv))
		return nil
	}
	out := make([]string, 0, len(rv.Content))
	for i, v := range rv.Content {
		v = resolve(v)
		if v.Kind != yaml.ScalarNode || isNull(v) {
			d.add(v.Line, fmt.Sprintf("%s[%d]", path, i), "must be a string, number or boolean (nested search spaces are not supported yet), got %s", describe(v))
			continue
		}
		out = append(out, v.Value)
	}
	return out
}

// optNumber decodes a number field; nil when it is absent or not a number.
func (d *decoder) optNumber(n *yaml.Node, path string) *float64 {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if f, ok := d.number(n, path); ok {
		return &f
	}
	return nil
}

// ParseSearchExpr parses a search space expression: choice(1, 2, 3),
// choice("a", "b"), randint(10), uniform(0.1, 1.0), quniform(0, 10, 2),
// normal(0, 1) and the other distributions with their fields in order.
// problem says why one does not parse.
func ParseSearchExpr(s string) (api.SearchDist, string) {
	m := exprRE.FindStringSubmatch(s)
	if m == nil {
		return api.SearchDist{}, fmt.Sprintf("%q is not a distribution: write a mapping with type (%s) and its fields, or an expression such as uniform(0.1, 1.0)", s, distTypesText)
	}
	typ := strings.ToLower(m[1])
	fields, ok := distFields[typ]
	if !ok {
		return api.SearchDist{}, fmt.Sprintf("%q: unknown distribution %s; use %s", s, m[1], distTypesText)
	}
	list := strings.TrimSpace(m[2])
	if typ == api.DistChoice && strings.HasPrefix(list, "[") && strings.HasSuffix(list, "]") {
		list = list[1 : len(list)-1] // choice([1, 2]) as in Azure's SDK
	}
	args, problem := splitArgs(list)
	if problem != "" {
		return api.SearchDist{}, fmt.Sprintf("%q: %s", s, problem)
	}
	sd := api.SearchDist{Type: typ}
	if typ == api.DistChoice {
		sd.Values = args
		return sd, ""
	}
	if len(args) != len(fields) {
		return api.SearchDist{}, fmt.Sprintf("%q: %s takes %d argument(s) (%s), got %d", s, typ, len(fields), strings.Join(fields, ", "), len(args))
	}
	for i, f := range fields {
		v, err := strconv.ParseFloat(args[i], 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return api.SearchDist{}, fmt.Sprintf("%q: %s must be a number, got %q", s, f, args[i])
		}
		switch f {
		case "upper":
			if v != math.Trunc(v) {
				return api.SearchDist{}, fmt.Sprintf("%q: upper must be an integer, got %s", s, args[i])
			}
			u := int(v)
			sd.Upper = &u
		case "min_value":
			sd.MinValue = &v
		case "max_value":
			sd.MaxValue = &v
		case "mu":
			sd.Mu = &v
		case "sigma":
			sd.Sigma = &v
		case "q":
			sd.Q = &v
		}
	}
	return sd, ""
}

// splitArgs splits a comma-separated argument list; quoted strings lose
// their quotes and may hold commas.
func splitArgs(s string) ([]string, string) {
	var out []string
	var cur strings.Builder
	quote, quoted := byte(0), false
	flush := func() string {
		a := strings.TrimSpace(cur.String())
		cur.Reset()
		if a == "" && !quoted {
			return "an empty argument"
		}
		out = append(out, a)
		quoted = false
		return ""
	}
	if strings.TrimSpace(s) == "" {
		return nil, "no arguments"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote, quoted = c, true
		case c == ',':
			if p := flush(); p != "" {
				return nil, p
			}
		default:
			cur.WriteByte(c)
		}
	}
	if quote != 0 {
		return nil, "a quote is not closed"
	}
	if p := flush(); p != "" {
		return nil, p
	}
	return out, ""
}

func (d *decoder) sampling(n *yaml.Node, path string) *api.Sampling {
	rv := resolve(n)
	if isNull(rv) {
		return nil
	}
	s := &api.Sampling{}
	if rv.Kind == yaml.ScalarNode {
		s.Type = strings.ToLower(strings.TrimSpace(rv.Value))
		return s
	}
	d.mapping(rv, path, []string{"type", "seed"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "type":
			t, _ := d.str(v, fp)
			s.Type = strings.ToLower(strings.TrimSpace(t))
		case "seed":
			if i, ok := d.integer(v, fp); ok {
				seed := int64(i)
				s.Seed = &seed
			}
		case "rule", "logbase":
			d.notSupported(fp, "not supported yet; tide samples with a pseudo-random generator; remove it")
		default:
			return false
		}
		return true
	})
	return s
}

func (d *decoder) earlyTermination(n *yaml.Node, path string) *api.EarlyTermination {
	if isNull(n) {
		return nil
	}
	et := &api.EarlyTermination{}
	given := map[string]bool{}
	known := []string{"type", "evaluation_interval", "delay_evaluation", "slack_factor", "slack_amount", "truncation_percentage", "exclude_finished_jobs"}
	d.mapping(n, path, known, func(key string, v *yaml.Node, fp string) bool {
		given[key] = true
		switch key {
		case "type":
			s, _ := d.str(v, fp)
			et.Type = strings.ToLower(strings.TrimSpace(s))
		case "evaluation_interval":
			et.EvaluationInterval, _ = d.integer(v, fp)
		case "delay_evaluation":
			et.DelayEvaluation, _ = d.integer(v, fp)
		case "slack_factor":
			et.SlackFactor = d.optNumber(v, fp)
		case "slack_amount":
			et.SlackAmount = d.optNumber(v, fp)
		case "truncation_percentage":
			et.TruncationPercentage, _ = d.integer(v, fp)
		case "exclude_finished_jobs":
			et.ExcludeFinishedJobs, _ = d.boolean(v, fp)
		default:
			return false
		}
		return true
	})
	own := map[string][]string{
		api.PolicyBandit:     {"slack_factor", "slack_amount"},
		api.PolicyTruncation: {"truncation_percentage", "exclude_finished_jobs"},
		api.PolicyMedian:     nil,
	}
	if fields, ok := own[et.Type]; ok {
		for _, f := range []string{"slack_factor", "slack_amount", "truncation_percentage", "exclude_finished_jobs"} {
			if given[f] && !slices.Contains(fields, f) {
				d.add(d.lines[path+"."+f], path+"."+f, "not a field of a %s policy", et.Type)
			}
		}
	}
	return et
}

// SearchSpaceRefs returns the parameters a command binds with
// ${{search_space.NAME}}, sorted, without repeats.
func SearchSpaceRefs(cmd string) []string {
	var out []string
	for _, m := range bindingRE.FindAllStringSubmatch(cmd, -1) {
		if r := searchRefRE.FindStringSubmatch(m[1]); r != nil && !slices.Contains(out, r[1]) {
			out = append(out, r[1])
		}
	}
	slices.Sort(out)
	return out
}

// BindSearchSpace substitutes ${{search_space.NAME}} in cmd with the
// trial's values, leaving every other binding as it is.
func BindSearchSpace(cmd string, values map[string]string) string {
	return bindingRE.ReplaceAllStringFunc(cmd, func(whole string) string {
		if r := searchRefRE.FindStringSubmatch(bindingRE.FindStringSubmatch(whole)[1]); r != nil {
			if v, ok := values[r[1]]; ok {
				return v
			}
		}
		return whole
	})
}

// sweepTrialDefault is Azure's max_total_trials when a sweep gives none.
const sweepTrialDefault = 1000

// SweepMaxTrials is how many trials a sweep runs at most: its
// max_total_trials (Azure's default 1000), and for grid sampling no more
// than the grid has points.
func SweepMaxTrials(j *api.Job) int {
	n := sweepTrialDefault
	if j.Limits != nil && j.Limits.MaxTotalTrials > 0 {
		n = j.Limits.MaxTotalTrials
	}
	if j.Sampling != nil && j.Sampling.Type == api.SamplingGrid {
		if g := GridSize(j.SearchSpace); g < n {
			n = g
		}
	}
	return n
}

// SweepMaxConcurrent is how many trials of a sweep run at once.
func SweepMaxConcurrent(j *api.Job) int {
	if j.Limits != nil && j.Limits.MaxConcurrentTrials > 0 {
		return j.Limits.MaxConcurrentTrials
	}
	return SweepMaxTrials(j)
}

// GridSize is the number of points of a grid over space (choice and
// randint parameters); it saturates at math.MaxInt32.
func GridSize(space map[string]api.SearchDist) int {
	n := 1
	for _, sd := range space {
		k := len(sd.Values)
		if sd.Type == api.DistRandint && sd.Upper != nil {
			k = *sd.Upper
		}
		if k <= 0 {
			return 0
		}
		if n > math.MaxInt32/k {
			return math.MaxInt32
		}
		n *= k
	}
	return n
}

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

// checkDist checks one search space parameter.
func checkDist(sd api.SearchDist, fp string, bad func(field, format string, args ...any)) {
	fields, ok := distFields[sd.Type]
	if !ok {
		if sd.Type == "" {
			bad(fp+".type", "required; one of %s", distTypesText)
		} else {
			bad(fp+".type", "unknown distribution %q; use %s", sd.Type, distTypesText)
		}
		return
	}
	present := map[string]bool{"values": sd.Values != nil, "upper": sd.Upper != nil, "min_value": sd.MinValue != nil,
		"max_value": sd.MaxValue != nil, "mu": sd.Mu != nil, "sigma": sd.Sigma != nil, "q": sd.Q != nil}
	missing := false
	for _, f := range fields {
		if !present[f] {
			bad(fp+"."+f, "required for a %s distribution (its fields: %s)", sd.Type, strings.Join(fields, ", "))
			missing = true
		}
	}
	if missing {
		return
	}
	switch {
	case sd.Type == api.DistChoice && len(sd.Values) == 0:
		bad(fp+".values", "must list at least one value")
	case sd.Type == api.DistRandint && *sd.Upper < 1:
		bad(fp+".upper", "must be >= 1 (values are 0 to upper-1), got %d", *sd.Upper)
	case sd.MinValue != nil && *sd.MinValue >= *sd.MaxValue:
		bad(fp+".max_value", "must be greater than min_value (%g >= %g)", *sd.MinValue, *sd.MaxValue)
	case sd.Sigma != nil && *sd.Sigma <= 0:
		bad(fp+".sigma", "must be > 0, got %g", *sd.Sigma)
	}
	if sd.Q != nil && *sd.Q <= 0 {
		bad(fp+".q", "must be > 0, got %g", *sd.Q)
	}
	if sd.Type == api.DistChoice {
		seen := map[string]bool{}
		for _, v := range sd.Values {
			if seen[v] {
				bad(fp+".values", "%q is listed twice", v)
			}
			seen[v] = true
		}
	}
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
