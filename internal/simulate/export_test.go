package simulate

import (
	"bytes"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestWriteTraceRoundTrip checks that an exported job list reads back as
// the same jobs: started jobs only, in submit order, running ones until
// now.
func TestWriteTraceRoundTrip(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	jobs := []api.Job{
		{Name: "late", Compute: "gpu", CreatedOn: t0.Add(90 * time.Second), StartTime: t0.Add(100 * time.Second), EndTime: t0.Add(160500 * time.Millisecond),
			Resources: &api.JobResources{InstanceCount: 2}},
		{Name: "first", Compute: "gpu", CreatedOn: t0, StartTime: t0.Add(3 * time.Minute), EndTime: t0.Add(4 * time.Minute)},
		{Name: "never-started", Compute: "gpu", CreatedOn: t0.Add(time.Second), Status: api.JobCanceled},
		{Name: "running", Compute: "cpu", CreatedOn: t0.Add(30 * time.Minute), StartTime: t0.Add(50 * time.Minute)},
	}
	var buf bytes.Buffer
	n, err := WriteTrace(&buf, jobs, map[string]string{"gpu": "Standard_NC4as_T4_v3"}, now)
	if err != nil || n != 3 {
		t.Fatalf("wrote %d jobs, %v; want 3", n, err)
	}
	want := GenericHeader + "\n" +
		"2025-03-01T09:00:00Z,60,1,Standard_NC4as_T4_v3\n" +
		"2025-03-01T09:01:30Z,60.5,2,Standard_NC4as_T4_v3\n" +
		"2025-03-01T09:30:00Z,600,1,\n"
	if buf.String() != want {
		t.Fatalf("trace:\n%s\nwant:\n%s", buf.String(), want)
	}
	tr, err := ReadTrace("export.csv", &buf)
	if err != nil {
		t.Fatal(err)
	}
	got := []Job{{Submit: 0, Duration: time.Minute, Instances: 1, Size: "Standard_NC4as_T4_v3", Line: 2},
		{Submit: 90 * time.Second, Duration: 60500 * time.Millisecond, Instances: 2, Size: "Standard_NC4as_T4_v3", Line: 3},
		{Submit: 30 * time.Minute, Duration: 10 * time.Minute, Instances: 1, Line: 4}}
	for i := range got {
		if tr.Jobs[i] != got[i] {
			t.Errorf("job %d read back as %+v, want %+v", i, tr.Jobs[i], got[i])
		}
	}
	if !tr.Start.Equal(t0) {
		t.Errorf("trace start %v, want %v", tr.Start, t0)
	}
}
