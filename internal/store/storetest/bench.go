package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// BenchPutJob measures an Update that creates one job, the write behind every
// job submission. Backends call it from their BenchmarkPutJob so the numbers
// compare.
func BenchPutJob(b *testing.B, s store.Store) {
	ctx := b.Context()
	err := s.Update(ctx, func(tx store.Tx) error {
		return tx.PutWorkspace(ctx, &api.Workspace{Name: "bench"})
	})
	if err != nil {
		b.Fatalf("put workspace: %v", err)
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			j := newJob("bench", fmt.Sprintf("job-%d", n.Add(1)), "cpu", api.JobQueued)
			if err := s.Update(ctx, func(tx store.Tx) error { return tx.PutJob(ctx, j, "") }); err != nil {
				b.Errorf("put job: %v", err)
				return
			}
		}
	})
}

// BenchUpdate measures a contended read-modify-write Update: every goroutine
// increments the same counter, the worst case for a serializable backend.
func BenchUpdate(b *testing.B, s store.Store) {
	ctx := b.Context()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			err := s.Update(ctx, func(tx store.Tx) error {
				v, err := tx.GetSetting(ctx, "bench_counter")
				if errors.Is(err, store.ErrNotFound) {
					v, err = "0", nil
				}
				if err != nil {
					return err
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					return err
				}
				return tx.PutSetting(ctx, "bench_counter", strconv.Itoa(n+1))
			})
			if err != nil {
				b.Errorf("update: %v", err)
				return
			}
		}
	})
}
