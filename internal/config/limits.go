package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// Default admission limits: far above what people and their scripts
// submit, low enough that a runaway loop is refused before it slows the
// server for everyone.
const (
	DefaultSubmitRate    = 200
	DefaultSubmitBurst   = 2000
	DefaultMaxQueuedJobs = 100_000
)

// Limits bound how fast one workspace may submit jobs and how many it may
// keep queued. A submission beyond either is refused with 429 Too Many
// Requests and a Retry-After header; nothing of it is stored. Sweep
// trials and pipeline steps do not count as submissions (their parent
// did), but queued ones count towards MaxQueuedJobs.
type Limits struct {
	Limit `yaml:",inline"`
	// Workspaces override the limits above for single workspaces (keys
	// are workspace names); a field left out keeps the server's value.
	Workspaces map[string]Limit `yaml:"workspaces"`
}

// Limit is one workspace's admission limits. Zero means "not set": the
// server's value, or the default.
type Limit struct {
	// SubmitRate is how many job submissions per second a workspace may
	// sustain: the refill rate of its token bucket. Default 200. Each
	// replica keeps its own buckets, so N replicas admit up to N times
	// as much.
	SubmitRate float64 `yaml:"submit_rate"`
	// SubmitBurst is how many submissions a workspace may make at once
	// after a quiet spell: the size of its bucket. Default 2000.
	SubmitBurst int `yaml:"submit_burst"`
	// MaxQueuedJobs is how many jobs of a workspace may wait in the queue
	// (status Queued); a submission beyond is refused until some start or
	// are canceled. Default 100000.
	MaxQueuedJobs int `yaml:"max_queued_jobs"`
}

// For returns the limits of workspace ws, every field set.
func (l *Limits) For(ws string) Limit {
	out := l.Limit
	if o, ok := l.Workspaces[ws]; ok {
		if o.SubmitRate != 0 {
			out.SubmitRate = o.SubmitRate
		}
		if o.SubmitBurst != 0 {
			out.SubmitBurst = o.SubmitBurst
		}
		if o.MaxQueuedJobs != 0 {
			out.MaxQueuedJobs = o.MaxQueuedJobs
		}
	}
	return out
}

func (l *Limits) fill() {
	if l.SubmitRate == 0 {
		l.SubmitRate = DefaultSubmitRate
	}
	if l.SubmitBurst == 0 {
		l.SubmitBurst = DefaultSubmitBurst
	}
	if l.MaxQueuedJobs == 0 {
		l.MaxQueuedJobs = DefaultMaxQueuedJobs
	}
}

func (l *Limits) validate() error {
	if err := l.Limit.validate("limits."); err != nil {
		return err
	}
	for _, ws := range slices.Sorted(maps.Keys(l.Workspaces)) {
		if err := l.Workspaces[ws].validate("limits.workspaces." + ws + "."); err != nil {
			return err
		}
	}
	return nil
}

func (l Limit) validate(prefix string) error {
	if l.SubmitRate < 0 || math.IsNaN(l.SubmitRate) || math.IsInf(l.SubmitRate, 0) {
		return fmt.Errorf("%ssubmit_rate: want submissions per second, more than 0 (got %g); raise it to lift the limit", prefix, l.SubmitRate)
	}
	if l.SubmitBurst < 0 {
		return fmt.Errorf("%ssubmit_burst: want a number of submissions, 1 or more (got %d)", prefix, l.SubmitBurst)
	}
	if l.MaxQueuedJobs < 0 {
		return fmt.Errorf("%smax_queued_jobs: want a number of jobs, 1 or more (got %d)", prefix, l.MaxQueuedJobs)
	}
	return nil
}
