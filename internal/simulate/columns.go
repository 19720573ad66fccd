package simulate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Columns maps a CSV trace's columns to what a job needs, for traces in
// any format with a header line. Each value names a column of the header.
// Submit is required; the run time comes from Duration, or from End minus
// Start (Start defaults to Submit); the nodes from Instances or GPUs (one
// GPU per node unless the compute's size has more), and at least enough to
// hold CPUs (vCPUs) and MemoryGB, the job's whole request, when given; Size
// is optional. Times are seconds from any origin or RFC 3339 times.
type Columns struct {
	Submit, Duration, Start, End, Instances, GPUs, CPUs, MemoryGB, Size string
	// cpuUnit and memUnit convert the CPU and memory columns to vCPUs and
	// GB (Alibaba's are in thousandths of a CPU and MiB); zero means 1.
	cpuUnit, memUnit float64
}

// AlibabaColumns reads Alibaba's GPU cluster trace (cluster-trace-gpu-v2023,
// openb_pod_list_*.csv): a pod runs from scheduled_time to deletion_time
// and needs num_gpu GPUs (a GPU-sharing pod, gpu_milli below 1000, takes a
// whole one; a CPU-only pod one node), cpu_milli thousandths of a vCPU and
// memory_mib MiB. Its gpu_spec (a GPU model constraint) and qos do not
// apply: the simulated compute has one size.
var AlibabaColumns = Columns{Submit: "creation_time", Start: "scheduled_time", End: "deletion_time", GPUs: "num_gpu",
	CPUs: "cpu_milli", MemoryGB: "memory_mib", cpuUnit: 1.0 / 1000, memUnit: 1.0 / 1024}

// alibabaHeader is the header of openb_pod_list_*.csv.
const alibabaHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"

// ParseColumns reads a --columns value: "submit=COL,duration=COL,..." with
// the keys submit, duration, start, end, instances (or instance_count),
// gpus, cpus, memory_gb and size.
func ParseColumns(s string) (Columns, error) {
	var c Columns
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return c, fmt.Errorf("%q: want key=column, e.g. submit=created,duration=runtime", kv)
		}
		dst := map[string]*string{"submit": &c.Submit, "duration": &c.Duration, "start": &c.Start, "end": &c.End,
			"instances": &c.Instances, "instance_count": &c.Instances, "gpus": &c.GPUs, "cpus": &c.CPUs, "memory_gb": &c.MemoryGB,
			"size": &c.Size}[k]
		if dst == nil {
			return c, fmt.Errorf("%q: unknown key %s; keys are submit, duration, start, end, instances, gpus, cpus, memory_gb, size", kv, k)
		}
		*dst = v
	}
	switch {
	case c.Submit == "":
		return c, errors.New("submit=COLUMN is required")
	case c.Duration == "" && c.End == "":
		return c, errors.New("give duration=COLUMN, or end=COLUMN (with start=COLUMN, else the run starts at submit)")
	case c.Duration != "" && c.End != "":
		return c, errors.New("give duration=COLUMN or end=COLUMN, not both")
	case c.Instances != "" && c.GPUs != "":
		return c, errors.New("give instances=COLUMN or gpus=COLUMN, not both")
	}
	return c, nil
}

// ReadTraceColumns reads a CSV trace with a header through cols. Rows
// whose start or end is empty (a job that never ran, such as Alibaba's
// pods that were never scheduled) are skipped and counted in
// Trace.Skipped.
func ReadTraceColumns(file string, r io.Reader, cols Columns, format string) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	cr.Comment = '#'
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: reading the header line: %w", file, err)
	}
	index := map[string]int{}
	for i, h := range head {
		index[strings.ToLower(strings.TrimSpace(h))] = i
	}
	col := func(key, name string) (int, error) {
		if name == "" {
			return -1, nil
		}
		i, ok := index[strings.ToLower(name)]
		if !ok {
			return 0, fmt.Errorf("%s:1: %s=%s: no such column; the header has %s", file, key, name, strings.Join(head, ", "))
		}
		return i, nil
	}
	var idx [numColumns]int
	for k, kv := range [numColumns][2]string{{"submit", cols.Submit}, {"duration", cols.Duration}, {"start", cols.Start},
		{"end", cols.End}, {"instances", cols.Instances}, {"gpus", cols.GPUs}, {"cpus", cols.CPUs}, {"memory_gb", cols.MemoryGB},
		{"size", cols.Size}} {
		if idx[k], err = col(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	t := &Trace{File: file, Format: format}
	var abs, rel int
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// FieldPos panics without a record: take the line from the
			// error.
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("%s:%d: %w", file, pe.StartLine, pe.Err)
			}
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		line, _ := cr.FieldPos(0)
		field := func(i int) string {
			if i < 0 || i >= len(rec) {
				return ""
			}
			return strings.TrimSpace(rec[i])
		}
		j, at, skip, err := columnJob(field, idx, cols)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		if skip {
			t.Skipped++
			continue
		}
		j.Line = line
		if at {
			abs = line
		} else {
			rel = line
		}
		if abs > 0 && rel > 0 {
			return nil, fmt.Errorf("%s:%d: submit: mixes times (line %d) and seconds (line %d); use one or the other", file, line, abs, rel)
		}
		t.Jobs = append(t.Jobs, j)
	}
	if len(t.Jobs) == 0 {
		return nil, fmt.Errorf("%s: the trace has no jobs that ran (%d rows skipped: never started)", file, t.Skipped)
	}
	if err := t.normalize(abs > 0); err != nil {
		return nil, err
	}
	return t, nil
}

// The columns a job is read from, in the order of columnJob's idx.
const (
	cSubmit = iota
	cDuration
	cStart
	cEnd
	cInstances
	cGPUs
	cCPUs
	cMemory
	cSize
	numColumns
)

// columnJob reads one row; at reports whether its times were RFC 3339.
func columnJob(field func(int) string, idx [numColumns]int, cols Columns) (j Job, at, skip bool, err error) {
	submit, at, err := instant("submit", field(idx[cSubmit]))
	if err != nil {
		return j, at, false, err
	}
	j.Submit = submit
	if idx[cDuration] >= 0 {
		if j.Duration, err = seconds("duration", field(idx[cDuration])); err != nil {
			return j, at, false, err
		}
	} else {
		start, end := submit, time.Duration(0)
		if idx[cStart] >= 0 {
			s := field(idx[cStart])
			if s == "" {
				return j, at, true, nil
			}
			if start, _, err = instant("start", s); err != nil {
				return j, at, false, err
			}
		}
		e := field(idx[cEnd])
		if e == "" {
			return j, at, true, nil
		}
		if end, _, err = instant("end", e); err != nil {
			return j, at, false, err
		}
		if end < start {
			return j, at, false, fmt.Errorf("end: %s is before the start", e)
		}
		if end-start > maxSeconds*time.Second {
			return j, at, false, fmt.Errorf("end: %s is more than ten years after the start; is the unit seconds?", e)
		}
		j.Duration = end - start
	}
	switch {
	case idx[cInstances] >= 0:
		n, err := strconv.Atoi(field(idx[cInstances]))
		if err != nil || n < 1 {
			return j, at, false, fmt.Errorf("instances: must be a whole number >= 1 (got %q)", field(idx[cInstances]))
		}
		j.Instances = n
	case idx[cGPUs] >= 0:
		g, err := strconv.Atoi(field(idx[cGPUs]))
		if err != nil || g < 0 {
			return j, at, false, fmt.Errorf("gpus: must be a whole number >= 0 (got %q)", field(idx[cGPUs]))
		}
		// A job without GPUs still takes a node.
		j.GPUs = max(g, 1)
	default:
		j.Instances = 1
	}
	if j.CPUs, err = amount("cpus", field, idx[cCPUs], cols.cpuUnit); err != nil {
		return j, at, false, err
	}
	if j.MemoryGB, err = amount("memory_gb", field, idx[cMemory], cols.memUnit); err != nil {
		return j, at, false, err
	}
	j.Size = field(idx[cSize])
	return j, at, false, nil
}

// amount reads an optional non-negative quantity in unit; an empty field is
// zero (not given).
func amount(key string, field func(int) string, i int, unit float64) (float64, error) {
	s := field(i)
	if i < 0 || s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%s: must be a number >= 0 (got %q)", key, s)
	}
	if unit == 0 {
		unit = 1
	}
	return v * unit, nil
}

// instant reads seconds or an RFC 3339 time; RFC 3339 times are kept as
// nanoseconds since the Unix epoch until normalize shifts them.
func instant(field, s string) (time.Duration, bool, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		d, err := sinceEpoch(field, t)
		return d, true, err
	}
	d, err := seconds(field, s)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %q is neither seconds nor an RFC 3339 time", field, s)
	}
	return d, false, nil
}

// normalize sorts the jobs by submit (stably, keeping the file's order for
// ties) and makes submits offsets from the first; with absolute times it
// records the first as Start. A trace spanning more than ten years is
// refused: no workload does, and a far-off time (a typo, or milliseconds
// read as seconds) would make every total meaningless.
func (t *Trace) normalize(absolute bool) error {
	slices.SortStableFunc(t.Jobs, func(a, b Job) int {
		switch {
		case a.Submit < b.Submit:
			return -1
		case a.Submit > b.Submit:
			return 1
		}
		return 0
	})
	first, last := t.Jobs[0], t.Jobs[len(t.Jobs)-1]
	if span := last.Submit - first.Submit; span > maxSeconds*time.Second {
		return fmt.Errorf("%s:%d: submit: the trace spans %.0f years from line %d to line %d; traces of more than ten years are not supported (is a time wrong, or the unit?)",
			t.File, last.Line, span.Hours()/24/365, first.Line, last.Line)
	}
	if absolute {
		t.Start = time.Unix(0, int64(first.Submit)).UTC()
	}
	for i := range t.Jobs {
		t.Jobs[i].Submit -= first.Submit
	}
	return nil
}

// Split divides the trace by time: the jobs submitted in the first share
// of its span, and the rest (their submits made offsets from the first of
// them). Both keep at least one job.
func (t *Trace) Split(share float64) (first, rest *Trace) {
	last := t.Jobs[len(t.Jobs)-1].Submit
	cut := time.Duration(float64(last) * share)
	i, _ := slices.BinarySearchFunc(t.Jobs, cut, func(j Job, at time.Duration) int {
		if j.Submit < at {
			return -1
		}
		return 1
	})
	i = min(max(i, 1), len(t.Jobs)-1)
	first = &Trace{File: t.File, Format: t.Format, Start: t.Start, Jobs: t.Jobs[:i]}
	rest = &Trace{File: t.File, Format: t.Format, Jobs: slices.Clone(t.Jobs[i:])}
	off := rest.Jobs[0].Submit
	if !t.Start.IsZero() {
		rest.Start = t.Start.Add(off)
	}
	for k := range rest.Jobs {
		rest.Jobs[k].Submit -= off
	}
	return first, rest
}
