package simulate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
)

// Job is one job of a trace.
type Job struct {
	// Submit is when the job was submitted, from the start of the trace.
	Submit time.Duration
	// Duration is how long the job runs once it has its nodes.
	Duration time.Duration
	// Instances is the number of nodes the job needs at once; for a Philly
	// trace it is filled in by Trace.Fit from the job's GPUs.
	Instances int
	// GPUs is the number of GPUs the job asked for (Philly traces); zero
	// when the trace gives instance counts.
	GPUs int
	// CPUs and MemoryGB are the job's whole request of vCPUs and memory
	// (Alibaba's traces, --columns cpus= and memory_gb=); zero when the
	// trace does not say. Fit gives the job enough nodes to hold them.
	CPUs, MemoryGB float64
	// Size is the VM size the job asked for; empty means the compute's.
	Size string
	// Line is the job's line in the trace file, for errors.
	Line int
}

// Trace is a job trace read from a file.
type Trace struct {
	// File names the trace in errors.
	File string
	// Format is "philly", "generic", "alibaba" or "columns".
	Format string
	// Skipped counts rows of jobs that never ran (Alibaba pods never
	// scheduled), left out of Jobs.
	Skipped int
	// Start is the wall-clock time of the first submit (the zero time when
	// the trace gives only offsets).
	Start time.Time
	// Jobs are the trace's jobs, in submit order.
	Jobs []Job
}

// Header of the generic trace format: submit and duration in seconds
// (submit from any origin, or an RFC 3339 time), instance_count, and an
// optional VM size.
const GenericHeader = "submit,duration,instance_count,size"

// phillyHeader is the header of the Philly trace as published
// (msr-fiddle/philly-traces, one row per job).
const phillyHeader = "timestamp,duration,num_gpus,gpu_time,cluster"

// ReadTrace reads a trace in the Philly, the generic or Alibaba's GPU
// trace format, told apart by the header line. Errors name the file and
// line.
func ReadTrace(file string, r io.Reader) (*Trace, error) {
	br := bufio.NewReader(r)
	if first, _ := br.Peek(len(alibabaHeader) + 2); strings.HasPrefix(strings.ReplaceAll(strings.ToLower(string(first)), " ", ""), alibabaHeader) {
		return ReadTraceColumns(file, br, AlibabaColumns, "alibaba")
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	t := &Trace{File: file}
	line := 0
	var absolute, relative int // lines with RFC 3339 submits and with seconds
	var parse func(fields []string, line int) (Job, time.Time, error)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if parse == nil {
			switch h := strings.ReplaceAll(strings.ToLower(text), " ", ""); {
			case h == phillyHeader:
				t.Format, parse = "philly", parsePhilly
			case h == GenericHeader || h == strings.TrimSuffix(GenericHeader, ",size"):
				t.Format, parse = "generic", parseGeneric
			default:
				return nil, fmt.Errorf("%s:%d: unknown trace header %q; want %q (generic), %q (Philly) or Alibaba's openb_pod_list header, or map the columns with --columns submit=COL,duration=COL,...", file, line, text, GenericHeader, phillyHeader)
			}
			continue
		}
		j, at, err := parse(strings.Split(text, ","), line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		j.Line = line
		if at.IsZero() {
			relative = line
		} else {
			absolute = line
		}
		if absolute > 0 && relative > 0 {
			return nil, fmt.Errorf("%s:%d: submit: mixes times (line %d) and seconds (line %d); use one or the other", file, line, absolute, relative)
		}
		if !at.IsZero() {
			// Absolute times: keep them as offsets from the Unix epoch for
			// now and shift them to the earliest submit below.
			if j.Submit, err = sinceEpoch("submit", at); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", file, line, err)
			}
			if t.Start.IsZero() || at.Before(t.Start) {
				t.Start = at
			}
		}
		t.Jobs = append(t.Jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	if parse == nil || len(t.Jobs) == 0 {
		return nil, fmt.Errorf("%s: the trace has no jobs; want a header line and one job per line (%s)", file, GenericHeader)
	}
	// Traces list jobs roughly by submit time (Philly's are not sorted).
	start := t.Start
	if err := t.normalize(false); err != nil {
		return nil, err
	}
	t.Start = start
	return t, nil
}

func parsePhilly(f []string, _ int) (Job, time.Time, error) {
	if len(f) != 5 {
		return Job{}, time.Time{}, fmt.Errorf("want 5 fields (%s), got %d", phillyHeader, len(f))
	}
	at, err := time.Parse(time.DateTime, strings.TrimSpace(f[0]))
	if err != nil {
		return Job{}, time.Time{}, fmt.Errorf("timestamp: %q is not a time like 2017-10-09 07:01:55", f[0])
	}
	d, err := seconds("duration", f[1])
	if err != nil {
		return Job{}, time.Time{}, err
	}
	g, err := strconv.Atoi(strings.TrimSpace(f[2]))
	if err != nil || g < 1 {
		return Job{}, time.Time{}, fmt.Errorf("num_gpus: must be a whole number >= 1 (got %q)", f[2])
	}
	return Job{Duration: d, GPUs: g}, at, nil
}

func parseGeneric(f []string, _ int) (Job, time.Time, error) {
	if len(f) < 3 || len(f) > 4 {
		return Job{}, time.Time{}, fmt.Errorf("want 3 or 4 fields (%s), got %d", GenericHeader, len(f))
	}
	var j Job
	var at time.Time
	s := strings.TrimSpace(f[0])
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		at = t
	} else {
		sub, err := seconds("submit", s)
		if err != nil {
			return Job{}, time.Time{}, fmt.Errorf("submit: %q is neither seconds nor an RFC 3339 time", s)
		}
		j.Submit = sub
	}
	d, err := seconds("duration", f[1])
	if err != nil {
		return Job{}, time.Time{}, err
	}
	j.Duration = d
	n, err := strconv.Atoi(strings.TrimSpace(f[2]))
	if err != nil || n < 1 {
		return Job{}, time.Time{}, fmt.Errorf("instance_count: must be a whole number >= 1 (got %q)", f[2])
	}
	j.Instances = n
	if len(f) == 4 {
		j.Size = strings.TrimSpace(f[3])
	}
	return j, at, nil
}

// maxSeconds bounds durations and submit offsets (ten years), far beyond
// any trace and far from time.Duration's limit.
const maxSeconds = 10 * 365 * 24 * 3600

// sinceEpoch turns a wall-clock time of a trace into nanoseconds since the
// Unix epoch, refusing years a trace cannot mean: time.Duration holds only
// 292 years, and between 1970 and 2200 no difference of two times wraps.
func sinceEpoch(field string, at time.Time) (time.Duration, error) {
	if y := at.Year(); y < 1970 || y >= 2200 {
		return 0, fmt.Errorf("%s: %s is not between 1970 and 2200; is the time right?", field, at.Format(time.RFC3339))
	}
	return time.Duration(at.UnixNano()), nil
}

// seconds parses a non-negative number of seconds.
func seconds(field, s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%s: must be a number of seconds >= 0 (got %q)", field, s)
	}
	if v > maxSeconds {
		return 0, fmt.Errorf("%s: %s seconds is more than ten years; is the unit seconds?", field, s)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// ErrNoFit is returned (wrapped) by Fit when a job cannot run on the
// compute at all.
var ErrNoFit = errors.New("job does not fit the compute")

// Fit checks every job against the compute's size and node cap and fills
// in Instances for jobs given in GPUs: one GPU per node when the size has
// none (the Philly convention), otherwise as many nodes as the job's GPUs
// need. A job that gives its vCPUs or memory gets at least the nodes that
// hold them, as jobs take whole nodes. sizes looks up a VM size by name.
func (t *Trace) Fit(c *api.Compute, sizes func(string) (api.Size, bool)) error {
	size, ok := sizes(c.Size)
	if !ok {
		return fmt.Errorf("size: unknown VM size %q; run 'tide compute list-sizes'", c.Size)
	}
	perNode := max(size.GPUs, 1)
	for i := range t.Jobs {
		j := &t.Jobs[i]
		if j.GPUs > 0 {
			j.Instances = (j.GPUs + perNode - 1) / perNode
		}
		if j.CPUs > 0 && size.VCPUs > 0 {
			j.Instances = max(j.Instances, int(math.Ceil(j.CPUs/float64(size.VCPUs)-1e-9)))
		}
		if j.MemoryGB > 0 && size.MemoryGB > 0 {
			j.Instances = max(j.Instances, int(math.Ceil(j.MemoryGB/size.MemoryGB-1e-9)))
		}
		if j.Size != "" && !strings.EqualFold(j.Size, size.Name) {
			js, ok := sizes(j.Size)
			if !ok {
				return fmt.Errorf("%s:%d: size: unknown VM size %q: %w", t.File, j.Line, j.Size, ErrNoFit)
			}
			if js.GPUs > size.GPUs || js.VCPUs > size.VCPUs || js.MemoryGB > size.MemoryGB {
				return fmt.Errorf("%s:%d: size %s (%d vCPUs, %g GB, %d GPUs) does not fit a node of compute %s (%s: %d vCPUs, %g GB, %d GPUs); simulate a compute of a larger size: %w",
					t.File, j.Line, js.Name, js.VCPUs, js.MemoryGB, js.GPUs, c.Name, size.Name, size.VCPUs, size.MemoryGB, size.GPUs, ErrNoFit)
			}
		}
		if j.Instances > c.MaxInstances {
			return fmt.Errorf("%s:%d: the job needs %d nodes but max_instances is %d; raise it (--set max_instances=%d): %w",
				t.File, j.Line, j.Instances, c.MaxInstances, j.Instances, ErrNoFit)
		}
	}
	return nil
}
