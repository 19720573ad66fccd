package catalog

import (
	"slices"
	"testing"

	"github.com/tideml/tide/api"
)

func TestAdmit(t *testing.T) {
	cat := Default()
	eight := 8 // two Standard_DS3_v2 nodes (4 vCPUs each)
	q := Quotas{Dedicated: Unlimited, LowPriority: Unlimited,
		Families: map[string]FamilyQuota{"standardDSv2Family": {Dedicated: &eight, LowPriority: &eight}}}
	hidden := func(name, size, tier string, max int) api.Compute {
		return api.Compute{Workspace: "ws", Name: name, Location: "local", Size: size, Tier: tier, MaxInstances: max, ServerlessJob: "job-" + name}
	}
	cluster := api.Compute{Workspace: "ws", Name: "cpu", Location: "local", Size: "Standard_DS3_v2", Tier: api.TierDedicated, MaxInstances: 1}
	a := hidden("a", "Standard_DS3_v2", api.TierDedicated, 0)
	b := hidden("b", "Standard_DS3_v2", api.TierDedicated, 0)
	c := hidden("c", "Standard_DS2_v2", api.TierDedicated, 0) // 2 vCPUs, same family
	spot := hidden("s", "Standard_DS3_v2", api.TierLowPriority, 0)
	gone := hidden("g", "Standard_Nope", api.TierDedicated, 0)
	computes := []api.Compute{cluster, a, b, c, spot, gone}
	reqs := []Request{{a, 1}, {b, 1}, {c, 1}, {spot, 2}, {gone, 1}}

	got := Admit(computes, reqs, cat, q)
	// The cluster holds 4 of 8: a fits (8 of 8); b does not; c would fit
	// nothing either, and waits behind b; spot has its own bucket.
	if want := []int{0, 3}; !slices.Equal(got.Admitted, want) {
		t.Fatalf("admitted %v, want %v (waiting %+v)", got.Admitted, want, got.Waiting)
	}
	if w := got.Waiting[1]; w.Quota == nil || w.Quota.InUse != 8 || w.Quota.Requested != 4 || w.Quota.Limit != 8 || w.Behind != "" {
		t.Errorf("b waits with %+v (quota %+v), want its own quota error: 8 in use of 8", w, w.Quota)
	}
	if w := got.Waiting[2]; w.Behind != "b" || w.Quota != nil {
		t.Errorf("c waits with %+v, want behind b", w)
	}
	if w := got.Waiting[4]; !w.UnknownSize {
		t.Errorf("a size gone from the catalog: %+v", w)
	}

	// Without the cluster, a and b fit, and c after them does not.
	got = Admit(computes[1:], reqs[:3], cat, q)
	if want := []int{0, 1}; !slices.Equal(got.Admitted, want) {
		t.Errorf("without the cluster: admitted %v, want %v", got.Admitted, want)
	}
	// A compute already admitted holds its quota: a request is counted
	// once, not on top of its own reservation.
	held := hidden("a", "Standard_DS3_v2", api.TierDedicated, 2)
	got = Admit([]api.Compute{held, b}, []Request{{b, 1}}, cat, q)
	if len(got.Admitted) != 0 || got.Waiting[0].Quota == nil {
		t.Errorf("b beside an admitted 2-node compute: %+v", got)
	}
	got = Admit([]api.Compute{b}, []Request{{b, 2}}, cat, q)
	if !slices.Equal(got.Admitted, []int{0}) {
		t.Errorf("b alone with 2 nodes: %+v", got)
	}
}
