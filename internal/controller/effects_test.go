package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
)

func TestJudgeCheck(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	grace := 10 * time.Second
	gone := &provider.NotFoundError{ID: "n"}
	down := errors.New("host h: unreachable")
	node := func(state string, since time.Duration) api.Node {
		return api.Node{ID: "n", State: state, StateSince: now.Add(-since), Error: "stopping"}
	}
	tests := []struct {
		name    string
		n       api.Node
		pn      *provider.Node
		err     error
		verdict int
		reason  string
	}{
		{"running agent", node(api.NodeIdle, time.Minute), &provider.Node{State: provider.StateRunning}, nil, checkKeep, ""},
		{"agent exited", node(api.NodeRunning, time.Minute), &provider.Node{State: provider.StateExited, Reason: "oom"}, nil, checkUnusable, "agent exited: oom"},
		{"not held", node(api.NodeIdle, time.Minute), nil, gone, checkUnusable, "the provider no longer holds the node"},
		{"host down", node(api.NodeIdle, time.Minute), nil, down, checkUnknown, down.Error()},
		{"preempted", node(api.NodeRunning, time.Minute), &provider.Node{State: provider.StatePreempted}, nil, checkPreempted, "the provider took the node away"},
		{"pending reason", node(api.NodePreparing, time.Second), &provider.Node{State: provider.StateRunning, Reason: "Resources"}, nil, checkPending, "Resources"},
		{"leaving, still stopping", node(api.NodeLeaving, time.Second), &provider.Node{State: provider.StateRunning}, nil, checkKeep, ""},
		{"leaving, gone", node(api.NodeLeaving, time.Second), nil, gone, checkRemove, "stopping"},
		{"leaving, host down past grace", node(api.NodeLeaving, time.Minute), nil, down, checkRemove, "stopping"},
		{"leaving, host down within grace", node(api.NodeLeaving, time.Second), nil, down, checkUnknown, down.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, r := judgeCheck(tt.n, tt.pn, tt.err, now, grace)
			if v != tt.verdict || r != tt.reason {
				t.Errorf("judgeCheck = %d %q; want %d %q", v, r, tt.verdict, tt.reason)
			}
		})
	}
}

func TestMayHaveCreated(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("creating node n: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("ssh: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{errors.New(`pods "tide-n" is forbidden: User cannot create resource "pods"`), false},
		{fmt.Errorf("creating node n: %w", &provider.InsufficientCapacityError{}), false},
	} {
		if got := mayHaveCreated(c.err); got != c.want {
			t.Errorf("mayHaveCreated(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
