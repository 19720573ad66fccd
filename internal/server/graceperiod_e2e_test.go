package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestLinesAfterSIGTERMAreStored: a preempted job whose program saves a
// checkpoint in its grace period prints about it after SIGTERM; those
// lines, up to the program's exit, are in the job's stored log, even when
// the job's shell died at SIGTERM first (issue 21, defect 1).
func TestLinesAfterSIGTERMAreStored(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, lowPriority)
	// The job's shell dies at SIGTERM at once; the program it runs
	// saves a checkpoint and says so during the grace period.
	j := submit(t, in, `command: >-
  echo "attempt $TIDE_ATTEMPT up";
  if [ "$TIDE_ATTEMPT" = 1 ]; then
  sh -c 'trap "echo got SIGTERM in attempt 1; sleep 0.5; echo checkpoint saved in attempt 1; exit 0" TERM; while :; do sleep 0.1; done';
  fi
compute: spot-cluster
`)
	node := runningNode(t, in, "spot-cluster", j.Name)
	waitFor(t, "the job's first line", 30*time.Second, func() bool {
		lines, _ := in.client.Logs(context.Background(), "default", j.Name, 0)
		return len(lines) > 0
	})
	if _, err := in.client.PreemptNode(context.Background(), "default", "spot-cluster", node.ID); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, in, j.Name, 90*time.Second)
	if got.Status != api.JobCompleted || got.Attempt != 2 {
		t.Fatalf("job after preemption: %s attempt %d (%s)\n%s", got.Status, got.Attempt, got.Error, events(t, in, j.Name))
	}
	text := logText(t, in, j.Name)
	for _, want := range []string{"attempt 1 up", "got SIGTERM in attempt 1", "checkpoint saved in attempt 1", "attempt 2 up"} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("the stored log lacks %q:\n%s", want, text)
		}
	}
}
