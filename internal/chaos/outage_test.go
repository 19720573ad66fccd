package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/tidetest"
)

// TestCapacityUnavailable runs a location whose capacity is unavailable
// for a window from the server's start (the local provider's
// capacity_unavailable_for: Create fails with insufficient capacity, as a
// cloud region out of a size does). Jobs submitted during the outage wait
// with a pending reason that says capacity is unavailable and until when;
// none starts before the window ends; all complete after it, each once.
func TestCapacityUnavailable(t *testing.T) {
	jobs := jobCount(8, 200)
	window := time.Duration(scale(8, 120)) * time.Second
	startedAt := time.Now()
	s := newServer(t, options{settings: fmt.Sprintf("      capacity_unavailable_for: %s\n", window)})
	until := startedAt.Add(window)
	effectsFile := tidetest.JobWritable(t, filepath.Join(s.dir, "effects"))
	s.createCompute("name: scarce\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 0\nmax_instances: 8\nidle_time_before_scale_down: 600\n")
	ctx := context.Background()
	names := make([]string, jobs)
	for i := range jobs {
		names[i] = fmt.Sprintf("scarce-%04d", i)
		s.submit(fmt.Sprintf("name: %s\ncompute: scarce\ncommand: echo $TIDE_JOB_NAME >> %s; sleep 0.2\n", names[i], effectsFile))
	}
	// While capacity is unavailable the jobs say so.
	var reason string
	waitFor(t, "a pending reason naming the outage", window, func() bool {
		j, err := s.client.Job(ctx, "default", names[0])
		if err != nil {
			return false
		}
		reason = j.PendingReason
		return strings.Contains(reason, "capacity unavailable until")
	})
	t.Logf("pending reason during the outage: %s", reason)
	if !strings.Contains(reason, "capacity_unavailable_for") {
		t.Errorf("pending reason %q does not name the setting", reason)
	}

	// After it, every job completes, once, and none started before it ended
	// (the server started after startedAt, so its window ends after until).
	deadline := time.Now().Add(window + time.Duration(scale(180, 900))*time.Second)
	lost, dup := s.exactlyOnce(names, effectsFile, deadline)
	for _, n := range names {
		if j := s.ended(n, deadline); j != nil && j.StartTime.Before(until) {
			t.Errorf("job %s started at %s, inside the outage (until after %s)", n, j.StartTime.Format(time.TimeOnly), until.Format(time.TimeOnly))
		}
	}
	record(row{scenario: "capacity unavailable for " + window.String(), jobs: jobs, lost: lost, duplicated: dup, took: time.Since(startedAt).Round(time.Second).String()})
}
