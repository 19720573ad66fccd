package simulate

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/spec"
)

// phillyPath is the Philly trace in the shared data set; benchmarks skip
// when it is not there.
const phillyPath = "../../../shared/data/traces/philly.csv"

func loadPhilly(tb testing.TB) (*Trace, Config) {
	tb.Helper()
	f, err := os.Open(phillyPath)
	if err != nil {
		tb.Skipf("Philly trace not available: %v", err)
	}
	defer f.Close()
	tr, err := ReadTrace("philly.csv", f)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := spec.ParseCompute("c.yml", []byte("type: amlcompute\nname: philly\nsize: Standard_NC4as_T4_v3\nmax_instances: 100000\n"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tr.Fit(c, catalog.Default().Lookup); err != nil {
		tb.Fatal(err)
	}
	size, _ := catalog.Default().Lookup(c.Size)
	return tr, Config{Compute: *c, Size: size, BootTime: 180 * time.Second}
}

// BenchmarkPhilly replays the full Philly trace (82,247 jobs) per policy
// (one GPU per node, 180 s boot, no node cap) and reports the CPU time per
// replay (cpu-s/op) besides the wall time: run it with GOMAXPROCS=1 for
// the time on one core.
func BenchmarkPhilly(b *testing.B) {
	tr, cfg := loadPhilly(b)
	for _, p := range []struct {
		name string
		idle int
	}{{"fixed-120s", 120}, {"fixed-3600s", 3600}, {"adaptive", 120}} {
		b.Run(p.name, func(b *testing.B) {
			c := cfg
			c.Policy = strings.SplitN(p.name, "-", 2)[0]
			c.Compute.IdleTimeBeforeScaleDown = p.idle
			cpu := cpuTime()
			for b.Loop() {
				if _, err := Run(tr, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}
