package simulate

import (
	"os"
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

// BenchmarkPhilly replays the full Philly trace (82,247 jobs) per policy.
func BenchmarkPhilly(b *testing.B) {
	tr, cfg := loadPhilly(b)
	for _, p := range []string{"fixed", "adaptive"} {
		b.Run(p, func(b *testing.B) {
			c := cfg
			c.Policy = p
			for b.Loop() {
				if _, err := Run(tr, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
