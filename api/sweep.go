package api

import "time"

// JobTypeSweep is a hyperparameter sweep: trials of one command job with
// parameters drawn from a search space, ranked by a metric they log.
const JobTypeSweep = "sweep"

// Search space distribution types, as in Azure ML.
const (
	DistChoice      = "choice"
	DistRandint     = "randint"
	DistUniform     = "uniform"
	DistLoguniform  = "loguniform"
	DistNormal      = "normal"
	DistLognormal   = "lognormal"
	DistQuniform    = "quniform"
	DistQloguniform = "qloguniform"
	DistQnormal     = "qnormal"
	DistQlognormal  = "qlognormal"
)

// Sampling algorithms.
const (
	SamplingRandom   = "random"
	SamplingGrid     = "grid"
	SamplingBayesian = "bayesian"
)

// Early termination policies.
const (
	PolicyBandit     = "bandit"
	PolicyMedian     = "median_stopping"
	PolicyTruncation = "truncation_selection"
)

// Objective goals.
const (
	GoalMaximize = "maximize"
	GoalMinimize = "minimize"
)

// SearchDist is one parameter of a sweep's search space. Which fields
// apply depends on Type: choice has Values; randint has Upper (values 0 to
// Upper-1); uniform, loguniform, quniform and qloguniform have MinValue
// and MaxValue (of the logarithm, for the log ones, as in Azure: the value
// is exp(uniform(min_value, max_value))); normal, lognormal, qnormal and
// qlognormal have Mu and Sigma; the q ones round to a multiple of Q.
type SearchDist struct {
	Type     string   `json:"type"`
	Values   []string `json:"values,omitempty"`
	Upper    *int     `json:"upper,omitempty"`
	MinValue *float64 `json:"min_value,omitempty"`
	MaxValue *float64 `json:"max_value,omitempty"`
	Mu       *float64 `json:"mu,omitempty"`
	Sigma    *float64 `json:"sigma,omitempty"`
	Q        *float64 `json:"q,omitempty"`
}

// Sampling is a sweep's sampling_algorithm.
type Sampling struct {
	Type string `json:"type"`
	// Seed makes random and Bayesian sampling repeatable; the server
	// picks one (and records it here) when the file gives none.
	Seed *int64 `json:"seed,omitempty"`
}

// Objective is what a sweep optimises: a metric its trials log.
type Objective struct {
	PrimaryMetric string `json:"primary_metric"`
	Goal          string `json:"goal"`
}

// EarlyTermination stops trials that do worse than the others. Each time a
// trial logs the primary metric is one interval; the policy looks at a
// trial every EvaluationInterval intervals from interval DelayEvaluation.
type EarlyTermination struct {
	Type               string `json:"type"`
	EvaluationInterval int    `json:"evaluation_interval,omitempty"`
	DelayEvaluation    int    `json:"delay_evaluation,omitempty"`
	// Bandit: a trial whose best value is worse than the best trial's
	// divided by (1+SlackFactor), or less SlackAmount, stops.
	SlackFactor *float64 `json:"slack_factor,omitempty"`
	SlackAmount *float64 `json:"slack_amount,omitempty"`
	// Truncation selection: the worst TruncationPercentage percent of the
	// trials stop; ExcludeFinishedJobs leaves ended trials out of the
	// comparison.
	TruncationPercentage int  `json:"truncation_percentage,omitempty"`
	ExcludeFinishedJobs  bool `json:"exclude_finished_jobs,omitempty"`
}

// SweepTrial is one trial of a sweep, set by the server: its child job,
// its parameters, and what it logged of the primary metric.
type SweepTrial struct {
	Index      int               `json:"index"`
	Job        string            `json:"job,omitempty"`
	Status     string            `json:"status"`
	Parameters map[string]string `json:"parameters"`
	// Metric is the last value of the primary metric the trial logged,
	// and Reports how many times it logged it.
	Metric  *float64 `json:"metric,omitempty"`
	Reports int      `json:"reports,omitempty"`
	// Stopped says why the early termination policy stopped the trial.
	Stopped string `json:"stopped,omitempty"`
	// Ended is when the sweep saw the trial end.
	Ended time.Time `json:"ended,omitzero"`
}
