package storetest

import (
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// testObjects: objects are kept by kind and key, replaced by a second put,
// listed by key prefix in key order, and deleted.
func testObjects(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetObject(ctx, "user", "ana")
		wantErr(t, "get missing object", err, store.ErrNotFound)
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		for _, kv := range [][2]string{{"ws1/b", `{"v":1}`}, {"ws1/a", `{"v":2}`}, {"ws10/a", `{"v":3}`}, {"ws2/a", `{"v":4}`}, {"ws1-x/a", `{"v":6}`}} {
			if err := tx.PutObject(ctx, "role", kv[0], []byte(kv[1])); err != nil {
				return err
			}
		}
		return tx.PutObject(ctx, "role", "ws1/b", []byte(`{"v":5}`))
	})
	view(t, s, func(tx store.Tx) error {
		docs, err := tx.ListObjects(ctx, "role", "ws1/")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range docs {
			got = append(got, compact(d))
		}
		if len(got) != 2 || got[0] != `{"v":2}` || got[1] != `{"v":5}` {
			t.Errorf(`ListObjects(role, "ws1/") = %v, want [{"v":2} {"v":5}]`, got)
		}
		if all, _ := tx.ListObjects(ctx, "role", ""); len(all) != 5 {
			t.Errorf("ListObjects(role, \"\") = %d objects, want 5", len(all))
		}
		if other, _ := tx.ListObjects(ctx, "secret", ""); len(other) != 0 {
			t.Errorf("ListObjects(secret) = %d objects, want 0", len(other))
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteObject(ctx, "role", "ws1/a") })
	err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteObject(ctx, "role", "ws1/a") })
	wantErr(t, "delete missing object", err, store.ErrNotFound)
}

func compact(b []byte) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c != ' ' {
			out = append(out, c)
		}
	}
	return string(out)
}

// testAudit: entries get increasing sequence numbers and list newest first,
// filtered by user and time.
func testAudit(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var seqs []int64
	update(t, s, func(tx store.Tx) error {
		var es []api.AuditEntry
		for i, u := range []string{"ana", "bo"} {
			es = append(es, api.AuditEntry{Time: t0.Add(time.Duration(i) * time.Minute), User: u, Method: "POST", Path: "/v1/x", Action: "Submit a job", Status: 201})
		}
		last := []api.AuditEntry{{Time: t0.Add(2 * time.Minute), User: "ana", Method: "POST", Path: "/v1/x", Action: "Submit a job", Status: 201}}
		if err := tx.AddAudit(ctx, es); err != nil {
			return err
		}
		if err := tx.AddAudit(ctx, last); err != nil {
			return err
		}
		for _, e := range append(es, last...) {
			seqs = append(seqs, e.Seq)
		}
		return nil
	})
	if !(0 < seqs[0] && seqs[0] < seqs[1] && seqs[1] < seqs[2]) {
		t.Fatalf("audit seqs = %v, want increasing", seqs)
	}
	view(t, s, func(tx store.Tx) error {
		all, err := tx.ListAudit(ctx, store.AuditFilter{})
		if err != nil || len(all) != 3 || all[0].Seq != seqs[2] || !all[0].Time.Equal(t0.Add(2*time.Minute)) || all[0].Status != 201 {
			t.Errorf("ListAudit = %+v, %v; want 3 entries newest first", all, err)
		}
		ana, _ := tx.ListAudit(ctx, store.AuditFilter{User: "ana"})
		if len(ana) != 2 {
			t.Errorf("ListAudit(user ana) = %d entries, want 2", len(ana))
		}
		recent, _ := tx.ListAudit(ctx, store.AuditFilter{Since: t0.Add(time.Minute)})
		if len(recent) != 2 {
			t.Errorf("ListAudit(since t0+1m) = %d entries, want 2", len(recent))
		}
		one, _ := tx.ListAudit(ctx, store.AuditFilter{Limit: 1})
		if len(one) != 1 || one[0].Seq != seqs[2] {
			t.Errorf("ListAudit(limit 1) = %+v, want the newest", one)
		}
		return nil
	})
}
