package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Currency of every price and cost tide reports: the catalog's prices are
// Azure's pay-as-you-go prices in US dollars (a server may override them
// per size, e.g. with its own hardware's cost per node-hour).
const Currency = "USD"

// Cost is what a compute or a job has cost so far: node-hours times the
// price of the nodes' size and tier.
type Cost struct {
	NodeHours float64 `json:"node_hours"`
	Amount    float64 `json:"amount"`
	Currency  string  `json:"currency"`
	// PricePerHour is the price of one node-hour of the resource's size
	// and tier.
	PricePerHour float64 `json:"price_per_hour"`
}

// CostReport is cost grouped by compute, node, job, user or tag over a
// period (GET /v1/workspaces/{workspace}/cost).
type CostReport struct {
	Workspace string     `json:"workspace"`
	By        string     `json:"by"`
	Since     time.Time  `json:"since,omitzero"`
	Until     time.Time  `json:"until"`
	Currency  string     `json:"currency"`
	Rows      []CostLine `json:"rows"`
	NodeHours float64    `json:"node_hours"`
	Total     float64    `json:"total"`
}

// CostLine is one group of a CostReport.
type CostLine struct {
	Key       string  `json:"key"`
	NodeHours float64 `json:"node_hours"`
	Amount    float64 `json:"amount"`
}

// CostGroups are the groupings of a CostReport. compute, node and
// workspace count node time (idle included); job, tag and user count the
// node time of the jobs' runs.
var CostGroups = []string{"compute", "node", "workspace", "job", "tag", "user"}

// ParseSince reads a point in time: an RFC 3339 time, or a duration back
// from now written as Go does (90m, 24h) or in days (7d).
func ParseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil && n >= 0 {
			return now.Add(-time.Duration(n * 24 * float64(time.Hour))).UTC(), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("since %q: want an RFC 3339 time (2026-11-01T00:00:00Z) or a duration back from now (7d, 24h, 90m)", v)
}
