package simulate

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/tideml/tide/api"
)

// WriteTrace writes jobs as a generic trace (GenericHeader): submit as an
// RFC 3339 time, the run time in seconds, instance_count and, when
// sizes knows the job's compute, the compute's VM size. A job that never
// started has no run time and is left out; a job still running counts as
// running until now. It returns the number of jobs written.
func WriteTrace(w io.Writer, jobs []api.Job, sizes map[string]string, now time.Time) (int, error) {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, GenericHeader)
	sorted := slices.Clone(jobs)
	slices.SortStableFunc(sorted, func(a, b api.Job) int { return a.CreatedOn.Compare(b.CreatedOn) })
	n := 0
	for i := range sorted {
		j := &sorted[i]
		if j.StartTime.IsZero() || j.CreatedOn.IsZero() {
			continue
		}
		end := j.EndTime
		if end.IsZero() {
			end = now
		}
		d := max(end.Sub(j.StartTime), 0)
		fmt.Fprintf(bw, "%s,%s,%d,%s\n", j.CreatedOn.UTC().Format(time.RFC3339Nano),
			strconv.FormatFloat(d.Seconds(), 'f', -1, 64), j.InstanceCount(), sizes[j.Compute])
		n++
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("writing trace: %w", err)
	}
	return n, nil
}
