package server_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store/pgtest"
)

// forEachStore runs a benchmark on SQLite and on a real PostgreSQL, so one
// run compares the two.
func forEachStore(b *testing.B, bench func(b *testing.B, dataDir string)) {
	b.Run("store=sqlite", func(b *testing.B) { bench(b, b.TempDir()) })
	b.Run("store=postgres", func(b *testing.B) {
		dir := b.TempDir()
		stores.Store(dir, pgtest.Start(b))
		bench(b, dir)
	})
}

// warmCluster starts a server with a compute of n nodes kept warm
// (min_instances = max_instances = n) and waits until they are idle.
func warmCluster(b *testing.B, dataDir string, n int) *instance {
	in := start(b, dataDir, "", "")
	b.Cleanup(func() { cleanup(b, in) })
	c := fmt.Sprintf("name: warm\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: %d\nmax_instances: %d\nidle_time_before_scale_down: 600\n", n, n)
	createCompute(b, in, c)
	deadline := time.Now().Add(60 * time.Second)
	for {
		cp, err := in.client.Compute(context.Background(), "default", "warm")
		if err == nil && cp.NodeStateCounts.Idle == n {
			return in
		}
		if time.Now().After(deadline) {
			b.Fatalf("nodes not idle: %+v", cp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkSubmitToRunning measures, on an idle warm node, the time from
// the client's submit to the job's first log line reaching the client.
func BenchmarkSubmitToRunning(b *testing.B) { forEachStore(b, benchSubmitToRunning) }

func benchSubmitToRunning(b *testing.B, dataDir string) {
	in := warmCluster(b, dataDir, 1)
	ctx := context.Background()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		j, err := in.client.CreateJob(ctx, "default", &api.Job{Type: "command", Command: "echo first", Compute: "warm"})
		if err != nil {
			b.Fatal(err)
		}
		_ = in.client.StreamLogs(ctx, "default", j.Name, api.StreamOptions{}, func(ev api.LogEvent) error {
			if ev.Type == api.LogEventLine {
				lat = append(lat, time.Since(t0))
				return errFirstLine // stop streaming
			}
			return nil
		})
		// Wait for the node to be idle again so every submit finds it warm.
		for {
			cur, err := in.client.Job(ctx, "default", j.Name)
			if err == nil && api.JobTerminal(cur.Status) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}

var errFirstLine = errors.New("first line")

// BenchmarkDispatchThroughput submits b.N no-op jobs as fast as 8 client
// goroutines can to a compute of 8 warm nodes and reports jobs per second
// from the first submit to the last completion.
func BenchmarkDispatchThroughput(b *testing.B) { forEachStore(b, benchDispatch) }

func benchDispatch(b *testing.B, dataDir string) {
	in := warmCluster(b, dataDir, 8)
	ctx := context.Background()
	b.ResetTimer()
	t0 := time.Now()
	names := make(chan string, b.N)
	var wg sync.WaitGroup
	work := make(chan int, b.N)
	for i := 0; i < b.N; i++ {
		work <- i
	}
	close(work)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				j, err := in.client.CreateJob(ctx, "default", &api.Job{Type: "command", Command: "true", Compute: "warm"})
				if err != nil {
					b.Error(err)
					return
				}
				names <- j.Name
			}
		}()
	}
	wg.Wait()
	close(names)
	var last string
	for name := range names {
		last = name
	}
	// Jobs run nearly in submit order: wait for the last one by name (cheap
	// for the server), then list the finished jobs until all are there
	// (listing them all every few milliseconds would cost the server more
	// than the dispatch being measured).
	for {
		j, err := in.client.Job(ctx, "default", last)
		if err == nil && api.JobTerminal(j.Status) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		js, err := in.client.Jobs(ctx, "default", api.JobFilter{Status: api.JobCompleted})
		if err == nil && len(js) >= b.N {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	el := time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "jobs/s")
}

// BenchmarkSubmit measures job submissions per second through the API,
// from 8 client goroutines; one node runs the first job and the rest queue.
func BenchmarkSubmit(b *testing.B) { forEachStore(b, benchSubmit) }

func benchSubmit(b *testing.B, dataDir string) {
	in := start(b, dataDir, "", "")
	b.Cleanup(func() { cleanup(b, in) })
	createCompute(b, in, "name: queue\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\n")
	ctx := context.Background()
	b.ResetTimer()
	t0, cpu0 := time.Now(), processCPU(b)
	b.SetParallelism(4) // 4 x GOMAXPROCS client goroutines
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := in.client.CreateJob(ctx, "default", &api.Job{Type: "command", Command: "sleep 600", Compute: "queue"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "jobs/s")
	// The process's CPU time (server, its controller and the clients) is
	// steadier than the rate on a shared machine.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// BenchmarkJobList measures `job list` of one compute holding 560 queued
// jobs (as one compute of the 10,000-node benchmark does) through the API,
// the client decoding the answer as the CLI does.
func BenchmarkJobList(b *testing.B) { forEachStore(b, benchJobList) }

func benchJobList(b *testing.B, dataDir string) {
	in := start(b, dataDir, "", "")
	b.Cleanup(func() { cleanup(b, in) })
	createCompute(b, in, "name: paused\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 0\n")
	ctx := context.Background()
	for range 560 {
		if _, err := in.client.CreateJob(ctx, "default", &api.Job{Type: "command", Command: "true", Compute: "paused"}); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := processCPU(b)
	for b.Loop() {
		js, err := in.client.Jobs(ctx, "default", api.JobFilter{Compute: "paused"})
		if err != nil || len(js) != 560 {
			b.Fatalf("job list: %d jobs, %v", len(js), err)
		}
	}
	// The process's CPU time (server and client) is steadier than the
	// wall time on a shared machine.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// processCPU is the CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
