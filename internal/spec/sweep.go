package spec

import (
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var searchRefRE = regexp.MustCompile(`^search_space\.([A-Za-z_][A-Za-z0-9_]*)$`)

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

func (d *decoder) sweep(root *yaml.Node, j *api.Job) (*api.Job, error) {
	d.mapping(root, "", sweepFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonField(j, key, v, fp) {
			return true
		}
		switch key {
		case "trial":
			j.Trial = d.trial(v, fp)
		case "search_space", "sampling_algorithm", "objective", "early_termination":
			d.sweepSetting(j, key, v, fp)
		case "limits":
			j.Limits = d.limits(v, fp, true)
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

// sweepSetting decodes a field a sweep job and a pipeline's sweep step
// share.
func (d *decoder) sweepSetting(j *api.Job, key string, v *yaml.Node, fp string) {
	switch key {
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
	case "early_termination":
		j.EarlyTermination = d.earlyTermination(v, fp)
	}
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
