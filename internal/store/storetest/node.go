package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

func testNodes(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	node := func(id, ws, compute string) *api.Node {
		return &api.Node{
			ID: id, Workspace: ws, Compute: compute, Location: "local", Provider: "local",
			State: api.NodeIdle, VCPUs: 2, MemoryGB: 7.5, CreatedOn: when(1), StateSince: when(2), LastHeartbeat: when(3),
		}
	}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetNode(ctx, "n1")
		wantErr(t, "get missing node", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteNode(ctx, "n1") })
	wantErr(t, "delete missing node", err, store.ErrNotFound)
	n1 := node("n1", "default", "cpu")
	update(t, s, func(tx store.Tx) error {
		for _, n := range []*api.Node{node("n3", "default", "cpu"), n1, node("n2", "default", "gpu"), node("n4", "other", "cpu")} {
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		n1.State, n1.Job = api.NodeRunning, "job-1"
		return tx.PutNode(ctx, n1)
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetNode(ctx, "n1")
		if err != nil {
			t.Fatalf("get node: %v", err)
		}
		checkUTC(t, "last_heartbeat", got.LastHeartbeat, n1.LastHeartbeat)
		want := *n1
		want.CreatedOn, want.StateSince, want.LastHeartbeat = got.CreatedOn, got.StateSince, got.LastHeartbeat
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("GetNode = %+v, want %+v", *got, want)
		}
		tests := []struct{ ws, compute, want string }{
			{"default", "cpu", "n1 n3"},
			{"default", "gpu", "n2"},
			{"other", "cpu", "n4"},
			{"default", "", "n1 n2 n3"},
			{"", "", "n1 n2 n3 n4"},
			{"default", "none", ""},
		}
		for _, tt := range tests {
			ns, err := tx.ListNodes(ctx, tt.ws, tt.compute)
			if err != nil {
				t.Fatalf("ListNodes(%q, %q): %v", tt.ws, tt.compute, err)
			}
			got := ""
			for i, n := range ns {
				if i > 0 {
					got += " "
				}
				got += n.ID
			}
			if got != tt.want {
				t.Errorf("ListNodes(%q, %q) = %q, want %q", tt.ws, tt.compute, got, tt.want)
			}
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteNode(ctx, "n1") })
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetNode(ctx, "n1")
		wantErr(t, "get deleted node", err, store.ErrNotFound)
		return nil
	})
}

func testTokens(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	admin := &store.Token{Hash: "aa", Name: "admin", Role: "admin"}
	agent := &store.Token{Hash: "bb", ID: "bb", Name: "ci", User: "ana", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Expires: time.Date(2026, 2, 2, 3, 4, 5, 0, time.UTC)}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetToken(ctx, "aa")
		wantErr(t, "get missing token", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteToken(ctx, "aa") })
	wantErr(t, "delete missing token", err, store.ErrNotFound)
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutToken(ctx, admin); err != nil {
			return err
		}
		return tx.PutToken(ctx, agent)
	})
	view(t, s, func(tx store.Tx) error {
		for _, want := range []*store.Token{admin, agent} {
			got, err := tx.GetToken(ctx, want.Hash)
			if err != nil {
				t.Fatalf("get token: %v", err)
			}
			if *got != *want {
				t.Errorf("GetToken(%q) = %+v, want %+v", want.Hash, *got, *want)
			}
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		ts, err := tx.ListTokens(ctx)
		if err != nil || len(ts) != 2 || ts[0].Hash != "aa" || ts[1].User != "ana" {
			t.Errorf("ListTokens = %+v, %v; want aa and bb", ts, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteToken(ctx, "bb") })
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetToken(ctx, "bb")
		wantErr(t, "get deleted token", err, store.ErrNotFound)
		return nil
	})
}

// testNodeUsage: removed nodes' lives are kept per workspace and
// compute, listed oldest first, filtered by when they ended.
func testNodeUsage(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	rows := []store.NodeUsage{
		{Workspace: "default", Compute: "a", Node: "a-1", Started: when(0), Ended: when(10), PricePerHour: 0.5},
		{Workspace: "default", Compute: "b", Node: "b-1", Started: when(1), Ended: when(20), PricePerHour: 1.25},
		{Workspace: "default", Compute: "a", Node: "a-2", Started: when(5), Ended: when(30), PricePerHour: 0.5},
		{Workspace: "other", Compute: "a", Node: "x-1", Started: when(0), Ended: when(40), PricePerHour: 9},
	}
	update(t, s, func(tx store.Tx) error {
		for _, u := range rows {
			if err := tx.AddNodeUsage(ctx, u); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		all, err := tx.ListNodeUsage(ctx, "default", "", time.Time{})
		if err != nil {
			return err
		}
		if len(all) != 3 || all[0].Node != "a-1" || all[1].Node != "b-1" || all[2].Node != "a-2" {
			t.Errorf("all of default = %+v, want a-1, b-1, a-2", all)
		}
		checkUTC(t, "started", all[1].Started, when(1))
		checkUTC(t, "ended", all[1].Ended, when(20))
		if all[1].PricePerHour != 1.25 || all[1].Compute != "b" || all[1].Workspace != "default" {
			t.Errorf("b-1 = %+v", all[1])
		}
		a, err := tx.ListNodeUsage(ctx, "default", "a", when(15))
		if err != nil {
			return err
		}
		if len(a) != 1 || a[0].Node != "a-2" {
			t.Errorf("compute a ended after :15 = %+v, want a-2", a)
		}
		return nil
	})
}

// testComputeSamples: samples are kept per compute and time (a second
// write at a time replaces the first), listed oldest first since a time,
// and pruned by age.
func testComputeSamples(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	update(t, s, func(tx store.Tx) error {
		for i, m := range []int{0, 1, 2, 2} {
			smp := api.ComputeSample{Time: when(m).UTC(), Nodes: api.NodeStateCounts{Idle: i}, Queued: i}
			if err := tx.AddComputeSample(ctx, "default", "gpu", smp); err != nil {
				return err
			}
		}
		return tx.AddComputeSample(ctx, "default", "cpu", api.ComputeSample{Time: when(1).UTC(), Running: 7})
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.ListComputeSamples(ctx, "default", "gpu", when(1))
		if err != nil {
			return err
		}
		if len(got) != 2 || got[0].Queued != 1 || got[1].Queued != 3 || !got[1].Time.Equal(when(2)) {
			t.Errorf("gpu samples since :01 = %+v, want :01 (1) and :02 (replaced: 3)", got)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.PruneComputeSamples(ctx, when(2)) })
	view(t, s, func(tx store.Tx) error {
		gpu, err := tx.ListComputeSamples(ctx, "default", "gpu", time.Time{})
		if err != nil {
			return err
		}
		cpu, err := tx.ListComputeSamples(ctx, "default", "cpu", time.Time{})
		if err != nil {
			return err
		}
		if len(gpu) != 1 || len(cpu) != 0 {
			t.Errorf("after pruning before :02: gpu %+v, cpu %+v", gpu, cpu)
		}
		return nil
	})
}
