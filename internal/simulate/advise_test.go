package simulate

import (
	"testing"
	"time"

	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
)

// TestAdviseFindsTheIdleTimeBetweenGridPoints: jobs of 20 s every 720 s
// leave a node idle 700 s between jobs, so an idle time of 720 s (the
// first 30 s step at or above 700) is the cheapest that keeps every job
// from waiting for a boot. The old fixed grid (..., 600, 1800, ...)
// recommended 1800 s; the search must not.
func TestAdviseFindsTheIdleTimeBetweenGridPoints(t *testing.T) {
	tr := &Trace{File: "periodic"}
	for i := range 600 {
		tr.Jobs = append(tr.Jobs, Job{Submit: time.Duration(i) * 720 * time.Second, Duration: 20 * time.Second, Instances: 1})
	}
	c := compute(t, "max_instances: 4\n")
	if err := tr.Fit(c, catalog.Default().Lookup); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Compute: *c, BootTime: 180 * time.Second}
	cfg.Size, _ = catalog.Default().Lookup(c.Size)
	goal := Goal{Stat: "mean", Under: time.Minute}
	adv, err := Advise(tr, cfg, goal)
	if err != nil {
		t.Fatal(err)
	}
	rec := adv.Candidates[adv.Recommended]
	if !adv.Met {
		t.Fatalf("no setting met %s: %+v", goal, rec)
	}
	if rec.Policy == autoscaler.DefaultPolicy && (rec.IdleTime < 700 || rec.IdleTime > 720) {
		t.Errorf("recommended idle time %d s, want 720 s (the cheapest that meets the goal)", rec.IdleTime)
	}
	if adv.Holdout == nil || !adv.Holdout.Met || adv.Confidence != "high" {
		t.Errorf("holdout %+v, confidence %s: want the goal met on the unseen third, high confidence", adv.Holdout, adv.Confidence)
	}
	found := false
	for _, c := range adv.Candidates {
		if c.Policy == autoscaler.DefaultPolicy && c.IdleTime == 720 && c.MinInstances == 0 {
			found = true
		}
	}
	if !found {
		t.Errorf("the search never tried 720 s: %+v", adv.Candidates)
	}
}
