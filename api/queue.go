package api

import (
	"fmt"
	"strconv"
)

// QueueSettings is Azure ML's queue_settings block of a job. tide reads
// priority from it.
type QueueSettings struct {
	// JobTier is Azure's job tier (null, spot, basic, standard, premium).
	// It sets a serverless job's tier; elsewhere the compute decides, and the
	// job's log and events say the field is ignored.
	JobTier string `json:"job_tier,omitempty"`
	// Priority is low, medium (the default) or high, as in Azure's SDK, or,
	// as a tide extension, a whole number from 1 to 1000 (low is 100,
	// medium 200, high 300). Higher priorities are placed first.
	Priority string `json:"priority,omitempty"`
}

// Named priorities and their numbers.
var priorities = map[string]int{"low": 100, "medium": 200, "high": 300}

// DefaultPriority is the priority of a job that names none (medium).
const DefaultPriority = 200

// ParsePriority turns a queue_settings.priority value into its number.
func ParsePriority(s string) (int, error) {
	if s == "" {
		return DefaultPriority, nil
	}
	if p, ok := priorities[s]; ok {
		return p, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		return 0, fmt.Errorf("want low, medium, high or a whole number from 1 to 1000 (got %q)", s)
	}
	return n, nil
}

// Priority is the job's priority number.
func (j *Job) Priority() int {
	if j.QueueSettings == nil {
		return DefaultPriority
	}
	p, err := ParsePriority(j.QueueSettings.Priority)
	if err != nil {
		return DefaultPriority
	}
	return p
}

// JobExtensions are tide's own job settings, under `tide:` in a job file.
type JobExtensions struct {
	Retries *JobRetries `json:"retries,omitempty"`
}

// JobRetries says how often an attempt that ended badly is retried, by
// cause. The job keeps its name; each retry is a new attempt.
type JobRetries struct {
	// OnNodeFailure counts retries after a node was preempted or became
	// unusable. Default 3.
	OnNodeFailure *int `json:"on_node_failure,omitempty"`
	// OnExitCode counts retries after the command exited non-zero.
	// Default 0: a failing command fails the job.
	OnExitCode *int `json:"on_exit_code,omitempty"`
}

// Default retry limits. They are finite so that no job loops forever.
const (
	DefaultRetriesOnNodeFailure = 3
	DefaultRetriesOnExitCode    = 0
	// MaxRetries bounds either setting.
	MaxRetries = 100
)

// RetryLimits returns the job's retry limits with the defaults applied.
func (j *Job) RetryLimits() (onNodeFailure, onExitCode int) {
	onNodeFailure, onExitCode = DefaultRetriesOnNodeFailure, DefaultRetriesOnExitCode
	if j.Tide != nil && j.Tide.Retries != nil {
		if r := j.Tide.Retries.OnNodeFailure; r != nil {
			onNodeFailure = *r
		}
		if r := j.Tide.Retries.OnExitCode; r != nil {
			onExitCode = *r
		}
	}
	return onNodeFailure, onExitCode
}

// JobRetryCounts are the retries a job used so far, by cause.
type JobRetryCounts struct {
	NodeFailure int `json:"node_failure,omitempty"`
	ExitCode    int `json:"exit_code,omitempty"`
}
