package api

import (
	"context"
	"net/url"
	"time"
)

// Metric is one value a job logged for a metric: at a step (the value's
// index in its series when the job gave none), from the job's log line Seq.
type Metric struct {
	Name  string    `json:"name"`
	Value float64   `json:"value"`
	Step  int64     `json:"step"`
	Time  time.Time `json:"time"`
	Seq   int64     `json:"seq"`
}

// MetricPrefix starts a log line that logs metrics: the job prints
//
//	##tide metric NAME=VALUE [NAME=VALUE ...] [step=N]
//
// to standard output, and tide stores each value under the job.
const MetricPrefix = "##tide metric "

// JobMetrics lists the metric values a job logged, in order, of one
// metric when name is not empty.
func (c *Client) JobMetrics(ctx context.Context, ws, job, name string) ([]Metric, error) {
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	return list[Metric](ctx, c, v1("workspaces", ws, "jobs", job, "metrics"), q)
}
