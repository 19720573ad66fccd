package autoscaler

import "time"

// DefaultPolicy is the policy a compute with an empty Policy uses.
const DefaultPolicy = "fixed"

// AdaptivePolicy names the policy that learns the idle timeout from the
// compute's idle gaps (Adaptive).
const AdaptivePolicy = "adaptive"

// Policy decides, per compute and call, how long idle nodes stay and how
// many nodes are kept warm beyond the demand. Plan applies every other rule
// (min, max, quota cap, busy nodes, queued demand) itself, so a policy can
// only tune scale-down and never break those invariants.
//
// A policy must be pure like Plan: its decision depends only on the compute
// and now. An adaptive policy that learns from a compute's history gets that
// history through the snapshot (a field added to Compute for it), not by
// reading a store.
type Policy interface {
	// Decide returns the scale-down settings for c at now. It must not
	// modify c.
	Decide(c *Compute, now time.Time) Decision
}

// Decision is a policy's choice for one compute.
type Decision struct {
	// IdleTimeout is how long a node must have been idle before it may leave.
	IdleTimeout time.Duration
	// Warm is the number of nodes kept on top of busy nodes and queued
	// demand (still within max and the quota cap), so that the next job
	// starts without a boot. Zero for the fixed policy.
	Warm int
	// Setting names what chose IdleTimeout in user-facing reasons, for
	// example "idle_time_before_scale_down".
	Setting string
	// Wake, when not zero, is when the policy wants to be asked again
	// even if nothing happens (to boot nodes ahead of predicted demand);
	// Plan folds it into Result.NextWake.
	Wake time.Time
}

// Registry maps policy names to policies, like Nomad's BuiltinSchedulers.
type Registry map[string]Policy

// BuiltinPolicies returns a new registry with the policies tide ships. The
// caller owns the map and may add its own.
func BuiltinPolicies() Registry {
	return Registry{
		DefaultPolicy:  Fixed{},
		AdaptivePolicy: Adaptive{},
	}
}

// Fixed is Azure ML's policy: an idle node leaves after the compute's
// idle_time_before_scale_down, and no node is kept warm beyond min_instances.
type Fixed struct{}

// Decide returns the compute's own idle timeout and no warm nodes.
func (Fixed) Decide(c *Compute, _ time.Time) Decision {
	return Decision{IdleTimeout: c.IdleTimeout, Setting: "idle_time_before_scale_down"}
}
