package spec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

// sweepBase is a valid sweep; tests edit it (old=>new, or append).
const sweepBase = `type: sweep
trial:
  command: python train.py --lr ${{search_space.lr}} --data ${{inputs.data}}
  code: src
inputs:
  data:
    type: uri_folder
    path: ./data
compute: cpu-cluster
search_space:
  lr:
    type: uniform
    min_value: 0.1
    max_value: 1.0
sampling_algorithm: random
objective:
  primary_metric: accuracy
  goal: Maximize
limits:
  max_total_trials: 8
  max_concurrent_trials: 2
`

func editSweep(t *testing.T, edit string) string {
	t.Helper()
	y := sweepBase
	for _, e := range strings.Split(edit, "|") {
		if e == "" {
			continue
		}
		old, repl, ok := strings.Cut(e, "=>")
		if !ok {
			y += e
			continue
		}
		if !strings.Contains(y, old) {
			t.Fatalf("edit %q: %q not in the base", e, old)
		}
		y = strings.Replace(y, old, repl, 1)
	}
	return y
}

func TestSweepDistributions(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	three := 3
	tests := []struct {
		name string
		yaml string
		want api.SearchDist
	}{
		{"choice", "{type: choice, values: [0.01, 0.1, adam, true]}", api.SearchDist{Type: "choice", Values: []string{"0.01", "0.1", "adam", "true"}}},
		{"randint", "{type: randint, upper: 3}", api.SearchDist{Type: "randint", Upper: &three}},
		{"uniform", "{type: uniform, min_value: 0.1, max_value: 1}", api.SearchDist{Type: "uniform", MinValue: f(0.1), MaxValue: f(1)}},
		{"loguniform", "{type: loguniform, min_value: -6, max_value: -1}", api.SearchDist{Type: "loguniform", MinValue: f(-6), MaxValue: f(-1)}},
		{"quniform", "{type: quniform, min_value: 0, max_value: 10, q: 2}", api.SearchDist{Type: "quniform", MinValue: f(0), MaxValue: f(10), Q: f(2)}},
		{"qloguniform", "{type: qloguniform, min_value: 0, max_value: 5, q: 1}", api.SearchDist{Type: "qloguniform", MinValue: f(0), MaxValue: f(5), Q: f(1)}},
		{"normal", "{type: normal, mu: 0, sigma: 1}", api.SearchDist{Type: "normal", Mu: f(0), Sigma: f(1)}},
		{"lognormal", "{type: lognormal, mu: 0, sigma: 0.5}", api.SearchDist{Type: "lognormal", Mu: f(0), Sigma: f(0.5)}},
		{"qnormal", "{type: qnormal, mu: 10, sigma: 3, q: 1}", api.SearchDist{Type: "qnormal", Mu: f(10), Sigma: f(3), Q: f(1)}},
		{"qlognormal", "{type: qlognormal, mu: 1, sigma: 0.5, q: 0.5}", api.SearchDist{Type: "qlognormal", Mu: f(1), Sigma: f(0.5), Q: f(0.5)}},
		{"choice expression", `choice(1, "a, b", 'c')`, api.SearchDist{Type: "choice", Values: []string{"1", "a, b", "c"}}},
		{"choice of a list", `choice([16, 32])`, api.SearchDist{Type: "choice", Values: []string{"16", "32"}}},
		{"randint expression", "randint(3)", api.SearchDist{Type: "randint", Upper: &three}},
		{"uniform expression", "uniform(0.1, 1)", api.SearchDist{Type: "uniform", MinValue: f(0.1), MaxValue: f(1)}},
		{"qlognormal expression", "QLogNormal(1, 0.5, 0.5)", api.SearchDist{Type: "qlognormal", Mu: f(1), Sigma: f(0.5), Q: f(0.5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := editSweep(t, "  lr:\n    type: uniform\n    min_value: 0.1\n    max_value: 1.0\n=>  lr: "+tt.yaml+"\n")
			j, err := ParseJob("s.yml", []byte(y), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(j.SearchSpace["lr"])
			want, _ := json.Marshal(tt.want)
			if string(got) != string(want) {
				t.Errorf("got %s, want %s", got, want)
			}
			// A parsed sweep round-trips through JSON (the API body).
			body, _ := json.Marshal(j)
			again, err := ParseJob("body", body, nil)
			if err != nil {
				t.Fatalf("round trip: %v\n%s", err, body)
			}
			if b, _ := json.Marshal(again); string(b) != string(body) {
				t.Errorf("round trip changed it:\n%s\n%s", body, b)
			}
		})
	}
}

func TestSweepDefaults(t *testing.T) {
	j, err := ParseJob("s.yml", []byte(editSweep(t, "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if j.Objective.Goal != api.GoalMaximize || j.ExperimentName != DefaultExperimentName || j.Inputs["data"].Mode != DefaultInputMode {
		t.Errorf("defaults: %+v %+v", j.Objective, j.Inputs)
	}
	if SweepMaxTrials(j) != 8 || SweepMaxConcurrent(j) != 2 {
		t.Errorf("limits: %d %d", SweepMaxTrials(j), SweepMaxConcurrent(j))
	}
	grid := "limits:\n  max_total_trials: 8\n  max_concurrent_trials: 2\n=>|sampling_algorithm: random=>sampling_algorithm: {type: grid}|" +
		"  lr:\n    type: uniform\n    min_value: 0.1\n    max_value: 1.0\n=>  lr: {type: choice, values: [1, 2, 3]}\n  k: randint(2)\n|--lr=>--k ${{search_space.k}} --lr"
	g, err := ParseJob("s.yml", []byte(editSweep(t, grid)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if GridSize(g.SearchSpace) != 6 || SweepMaxTrials(g) != 6 || SweepMaxConcurrent(g) != 6 {
		t.Errorf("grid: size %d, trials %d, at once %d", GridSize(g.SearchSpace), SweepMaxTrials(g), SweepMaxConcurrent(g))
	}
}

func TestSweepErrors(t *testing.T) {
	space := "  lr:\n    type: uniform\n    min_value: 0.1\n    max_value: 1.0\n=>"
	tests := []struct{ name, edit, want string }{
		{"unknown distribution", space + "  lr: {type: gaussian, mu: 0}\n",
			`s.yml:11: search_space.lr.type: unknown distribution "gaussian"; use choice, randint, uniform, loguniform, quniform, qloguniform, normal, lognormal, qnormal or qlognormal`},
		{"missing field", space + "  lr: {type: normal, mu: 0}\n", "s.yml:11: search_space.lr.sigma: required for a normal distribution (its fields: mu, sigma)"},
		{"field of another distribution", space + "  lr: {type: uniform, min_value: 0, max_value: 1, q: 2}\n", "s.yml:11: search_space.lr.q: not a field of a uniform distribution; it has min_value, max_value"},
		{"min above max", "max_value: 1.0=>max_value: 0.05", "s.yml:14: search_space.lr.max_value: must be greater than min_value (0.1 >= 0.05)"},
		{"sigma", space + "  lr: {type: lognormal, mu: 0, sigma: 0}\n", "s.yml:11: search_space.lr.sigma: must be > 0, got 0"},
		{"q", space + "  lr: {type: qnormal, mu: 0, sigma: 1, q: -1}\n", "s.yml:11: search_space.lr.q: must be > 0, got -1"},
		{"randint upper", space + "  lr: randint(0)\n", "s.yml:11: search_space.lr.upper: must be >= 1 (values are 0 to upper-1), got 0"},
		{"empty choice", space + "  lr: {type: choice, values: []}\n", "s.yml:11: search_space.lr.values: must list at least one value"},
		{"nested choice", space + "  lr: {type: choice, values: [{a: 1}]}\n", "s.yml:11: search_space.lr.values[0]: must be a string, number or boolean (nested search spaces are not supported yet), got a mapping"},
		{"not a number", "min_value: 0.1=>min_value: low", `s.yml:13: search_space.lr.min_value: must be a number (got "low")`},
		{"expression does not parse", space + "  lr: uniform(0.1\n", `s.yml:11: search_space.lr: "uniform(0.1" is not a distribution: write a mapping with type (choice, randint, uniform, loguniform, quniform, qloguniform, normal, lognormal, qnormal or qlognormal) and its fields, or an expression such as uniform(0.1, 1.0)`},
		{"expression arguments", space + "  lr: uniform(0.1)\n", `s.yml:11: search_space.lr: "uniform(0.1)": uniform takes 2 argument(s) (min_value, max_value), got 1`},
		{"expression number", space + "  lr: normal(0, wide)\n", `s.yml:11: search_space.lr: "normal(0, wide)": sigma must be a number, got "wide"`},
		{"expression quote", space + "  lr: choice('a, b)\n", `s.yml:11: search_space.lr: "choice('a, b)": a quote is not closed`},
		{"unknown expression", space + "  lr: beta(1, 2)\n", `s.yml:11: search_space.lr: "beta(1, 2)": unknown distribution beta; use choice, randint, uniform, loguniform, quniform, qloguniform, normal, lognormal, qnormal or qlognormal`},
		{"binding not in the space", "${{search_space.lr}}=>${{search_space.rate}}", "s.yml:3: trial.command: ${{search_space.rate}} is not in the search space; add search_space.rate or remove the reference\ns.yml:11: search_space.lr: the trial does not use it; bind it in trial.command with ${{search_space.lr}} or remove it"},
		{"unused parameter", "--lr ${{search_space.lr}} =>", "s.yml:11: search_space.lr: the trial does not use it; bind it in trial.command with ${{search_space.lr}} or remove it"},
		{"unbound input", "${{inputs.data}}=>${{inputs.dataset}}", "s.yml:3: trial.command: ${{inputs.dataset}} is not defined under inputs; add inputs.dataset or remove the reference"},
		{"grid over a continuous distribution", "sampling_algorithm: random=>sampling_algorithm: grid",
			"s.yml:11: search_space.lr: grid sampling needs a finite set of values, but lr is a continuous uniform distribution; use type: choice with the values to try, or sampling_algorithm: random"},
		{"unknown sampling", "sampling_algorithm: random=>sampling_algorithm: sobol", `s.yml:15: sampling_algorithm: "sobol" is not a sampling algorithm; use random, grid or bayesian`},
		{"seed on grid", "sampling_algorithm: random=>sampling_algorithm: {type: grid, seed: 3}|" + space + "  lr: choice(1, 2)\n", "s.yml:12: sampling_algorithm.seed: grid sampling takes no seed: it tries every point in order"},
		{"sobol rule", "sampling_algorithm: random=>sampling_algorithm: {type: random, rule: sobol}", "s.yml:15: sampling_algorithm.rule: not supported yet; tide samples with a pseudo-random generator; remove it"},
		{"goal", "goal: Maximize=>goal: best", `s.yml:18: objective.goal: must be maximize or minimize, got "best"`},
		{"no objective", "objective:\n  primary_metric: accuracy\n  goal: Maximize\n=>", "s.yml: objective: required: the metric the trials log and whether to maximize or minimize it, e.g. objective: {primary_metric: accuracy, goal: maximize}"},
		{"bad metric name", "primary_metric: accuracy=>primary_metric: top 1", `s.yml:17: objective.primary_metric: "top 1" is not a metric name: letters, digits, '_', '.', '-' and '/'`},
		{"no trial", "trial:\n  command: python train.py --lr ${{search_space.lr}} --data ${{inputs.data}}\n  code: src\n=>", "s.yml: trial: required: the command each trial runs, e.g. trial: {command: python train.py --lr ${{search_space.lr}}, code: src, environment: ...}"},
		{"no search space", "search_space:\n" + space + "", "s.yml:3: trial.command: ${{search_space.lr}} is not in the search space; add search_space.lr or remove the reference\ns.yml: search_space: required: the parameters to sweep, e.g. search_space: {lr: {type: loguniform, min_value: -6, max_value: -1}}"},
		{"command at the top", "command: python x.py\n", "s.yml:22: command: belongs under trial: (the command each trial runs)"},
		{"trial inputs", "  code: src\n=>  code: src\n  inputs: {a: 1}\n", "s.yml:5: trial.inputs: a sweep's inputs and outputs are at its top level, beside trial:; move them there"},
		{"negative limit", "max_total_trials: 8=>max_total_trials: -1", "s.yml:20: limits.max_total_trials: must be >= 1 (got -1)"},
		{"unknown limit", "max_total_trials: 8=>max_trials: 8", `s.yml:20: limits: unknown field "max_trials"; known fields: max_concurrent_trials, max_total_trials, timeout, trial_timeout`},
		{"bandit without slack", "early_termination: {type: bandit, evaluation_interval: 1}\n", "s.yml:22: early_termination.slack_factor: a bandit policy needs slack_factor (a ratio, e.g. 0.1) or slack_amount (in the metric's units)"},
		{"bandit with both", "early_termination: {type: bandit, slack_factor: 0.1, slack_amount: 0.2}\n", "s.yml:22: early_termination.slack_amount: give slack_factor or slack_amount, not both"},
		{"truncation percentage", "early_termination: {type: truncation_selection}\n", "s.yml:22: early_termination.truncation_percentage: required: the percentage of the worst trials to stop at each evaluation, 1 to 99 (got 0)"},
		{"field of another policy", "early_termination: {type: median_stopping, slack_factor: 0.1}\n", "s.yml:22: early_termination.slack_factor: not a field of a median_stopping policy"},
		{"unknown policy", "early_termination: {type: hyperband}\n", `s.yml:22: early_termination.type: "hyperband" is not a policy; use bandit, median_stopping or truncation_selection`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJob("s.yml", []byte(editSweep(t, tt.edit)), nil)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestSweepFieldsOnCommandJobs(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"command: x\nlimits: {max_total_trials: 3}\n", "j.yml:2: limits.max_total_trials: belongs to sweep jobs; set type: sweep"},
		{"command: x\nobjective: {primary_metric: a, goal: maximize}\n", "j.yml:2: objective: belongs to sweep jobs; set type: sweep"},
	}
	for _, tt := range tests {
		_, err := ParseJob("j.yml", []byte(tt.yaml), nil)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: got %v, want %s", tt.yaml, err, tt.want)
		}
	}
}

func FuzzParseSearchExpr(f *testing.F) {
	for _, s := range []string{"choice(1, 2)", "uniform(0, 1)", `choice("a,b", 'c')`, "randint(3)", "qnormal(0, 1, 0.5)", "x(", "choice([1,2])"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sd, problem := ParseSearchExpr(s)
		if problem != "" {
			return
		}
		var errs collector
		checkDist(sd, "x", func(field, format string, args ...any) { errs.add(0, field, format, args...) })
		_ = errs.err()
	})
}

// componentSweep is a sweep whose trial is an inline component (as the
// CLI sends a trial: ./file.yml once it read the file).
const componentSweep = `type: sweep
trial:
  component:
    name: train
    command: python train.py --lr ${{inputs.lr}} --epochs ${{inputs.epochs}} --data ${{inputs.data}}
    inputs:
      lr: {type: number}
      epochs: {type: integer, default: 3}
      data: {type: uri_folder}
    outputs:
      model: {type: uri_folder}
inputs:
  data:
    type: uri_folder
    path: ./data
search_space:
  lr: uniform(0.1, 1)
sampling_algorithm: random
objective: {primary_metric: acc, goal: maximize}
`

func TestSweepComponentTrial(t *testing.T) {
	if _, err := ParseJob("s.yml", []byte(componentSweep), nil); err != nil {
		t.Fatal(err)
	}
	j, err := ParseJob("s.yml", []byte("type: sweep\ntrial: ./train.yml\nsearch_space: {lr: {type: choice, values: [1]}}\nsampling_algorithm: grid\nobjective: {primary_metric: a, goal: maximize}\n"), nil)
	if err != nil || j.Trial.Component.Ref != "./train.yml" {
		t.Fatalf("a component file trial: %v %+v", err, j)
	}
	tests := []struct{ name, old, new, want string }{
		{"not an input", "  lr: uniform(0.1, 1)\n", "  lr: uniform(0.1, 1)\n  momentum: uniform(0, 1)\n",
			"s.yml:18: search_space.momentum: component train has no input momentum; a component trial's parameters are its inputs: data, epochs, lr"},
		{"data input", "  lr: uniform(0.1, 1)\n", "  lr: uniform(0.1, 1)\n  data: choice(1, 2)\n",
			"s.yml:18: search_space.data: input data of component train is uri_folder data; search space parameters are values\ns.yml:13: inputs.data: data is a search space parameter; remove it from inputs"},
		{"fractions for an integer", "  lr: uniform(0.1, 1)\n", "  lr: uniform(0.1, 1)\n  epochs: quniform(1, 10, 0.5)\n",
			"s.yml:18: search_space.epochs: input epochs of component train is an integer, but a quniform distribution gives fractions; use randint, choice or a q distribution with a whole q"},
		{"choice value of the wrong type", "  lr: uniform(0.1, 1)\n", "  lr: uniform(0.1, 1)\n  epochs: choice(1, many)\n",
			`s.yml:18: search_space.epochs.values: "many" is not an integer`},
		{"required input", "inputs:\n  data:\n    type: uri_folder\n    path: ./data\n", "",
			"s.yml: inputs.data: required by component train (a uri_folder input with no default); give it under inputs or search_space"},
		{"undeclared input", "    path: ./data\n", "    path: ./data\n  speed: 3\n",
			"s.yml:16: inputs.speed: component train declares no input speed; its inputs: data, epochs, lr"},
		{"undeclared output", "sampling_algorithm", "outputs: {weights: {}}\nsampling_algorithm",
			"s.yml:18: outputs.weights: component train declares no output weights; its outputs: model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJob("s.yml", []byte(strings.Replace(componentSweep, tt.old, tt.new, 1)), nil)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// sweepPipeline has a sweep step whose trial is an inline component (as
// the CLI sends trial: ./train.yml), fed by a step and feeding another.
const sweepPipeline = `type: pipeline
settings: {default_compute: cpu}
jobs:
  prep:
    command: echo data > ${{outputs.data}}/d.txt
    outputs: {data: {}}
  tune:
    type: sweep
    trial:
      component:
        command: python train.py --lr ${{inputs.lr}} --data ${{inputs.data}} --out ${{outputs.model}}
        inputs:
          lr: {type: number}
          data: {type: uri_folder}
          epochs: {type: integer, default: 3}
        outputs:
          model: {type: uri_folder}
    inputs:
      data: ${{parent.jobs.prep.outputs.data}}
    outputs:
      model:
    search_space:
      lr: uniform(0.1, 1)
    sampling_algorithm: random
    objective: {primary_metric: acc, goal: maximize}
    limits: {max_total_trials: 4, max_concurrent_trials: 2}
    early_termination: {type: median_stopping}
  score:
    command: ls ${{inputs.model}}
    inputs:
      model: ${{parent.jobs.tune.outputs.model}}
`

func TestSweepStep(t *testing.T) {
	p, err := ParseJob("p.yml", []byte(sweepPipeline), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Jobs["tune"]
	if s.Type != api.JobTypeSweep || StepComponent(s) == nil || s.Limits.MaxTotalTrials != 4 || s.EarlyTermination.Type != api.PolicyMedian {
		t.Errorf("step = %+v", s)
	}
	if order, _ := StepOrder(p); strings.Join(order, " ") != "prep tune score" {
		t.Errorf("order = %v", order)
	}
	tests := []struct{ name, old, new, want string }{
		{"command trial", "    trial:\n      component:\n", "    trial:\n      command: x\n      component:\n",
			"jobs.tune.trial: a trial is a component or a command"},
		{"parameter not an input", "      lr: uniform(0.1, 1)\n", "      rate: uniform(0.1, 1)\n",
			"jobs.tune.search_space.rate: component of step trial has no input rate"},
		{"grid over continuous", "sampling_algorithm: random", "sampling_algorithm: grid",
			"jobs.tune.search_space.lr: grid sampling needs a finite set of values"},
		{"sweep fields on a command step", "    outputs: {data: {}}\n", "    outputs: {data: {}}\n    objective: {primary_metric: a, goal: maximize}\n",
			"jobs.prep.type: trial, search_space, sampling_algorithm, objective and early_termination belong to sweep steps; set type: sweep"},
		{"missing output", "tune.outputs.model}}", "tune.outputs.weights}}", "step tune has no output weights"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJob("p.yml", []byte(strings.Replace(sweepPipeline, tt.old, tt.new, 1)), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}
