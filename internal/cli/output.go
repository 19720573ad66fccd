package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/sweep"
)

// printer writes results as a table (for people) or as the API's JSON or
// YAML (for programs: exactly the API object, a list as an array).
type printer struct {
	format string
	w      io.Writer
	now    time.Time
	loc    *time.Location
}

// print writes v in JSON or YAML, or calls table for the table format.
func (p *printer) print(v any, table func(w io.Writer)) error {
	switch p.format {
	case "json":
		b, err := marshalJSON(v)
		if err != nil {
			return err
		}
		_, err = p.w.Write(b)
		return err
	case "yaml":
		b, err := spec.MarshalYAML(v)
		if err != nil {
			return err
		}
		_, err = p.w.Write(b)
		return err
	default:
		table(p.w)
		return nil
	}
}

// marshalJSON indents v and prints a nil slice as [] rather than null, so a
// program reading an empty list gets an array.
func marshalJSON(v any) ([]byte, error) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		v = []any{}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding output: %w", err)
	}
	return append(b, '\n'), nil
}

// table writes aligned columns.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// kv is one line of a key/value view.
type kv struct{ k, v string }

// details writes key/value lines with aligned values, skipping empty ones.
func details(w io.Writer, lines []kv) {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	for _, l := range lines {
		if l.v == "" {
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s\n", l.k, l.v)
	}
	tw.Flush()
}

// age writes a duration the way kubectl does: the largest one or two units.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		s := int(d.Seconds()) % 60
		if s == 0 {
			return fmt.Sprintf("%dm", int(d.Minutes()))
		}
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), s)
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		m := int(d.Minutes()) % 60
		if m == 0 {
			return fmt.Sprintf("%dh", int(d.Hours()))
		}
		return fmt.Sprintf("%dh%dm", int(d.Hours()), m)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// when writes a time with its age, or "" for the zero time.
func (p *printer) when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if t.After(p.now) {
		return fmt.Sprintf("%s (in %s)", t.In(p.loc).Format(time.DateTime), age(t.Sub(p.now)))
	}
	return fmt.Sprintf("%s (%s ago)", t.In(p.loc).Format(time.DateTime), age(p.now.Sub(t)))
}

func (p *printer) ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return age(p.now.Sub(t))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func itoa(i int) string { return strconv.Itoa(i) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func computeTable(w io.Writer, cs []api.Compute) {
	rows := make([][]string, 0, len(cs))
	for _, c := range cs {
		size, loc := c.Size, c.Location
		if c.VirtualMachine != nil {
			size, loc = machineSize(c.VirtualMachine), c.Address
		}
		if c.Kubernetes != nil {
			size, loc = strings.Join(c.Kubernetes.InstanceTypeNames(), ","), c.Kubernetes.Server
		}
		rows = append(rows, []string{
			c.Name, c.Type, size, c.Tier, dash(loc),
			itoa(c.MinInstances), itoa(c.MaxInstances),
			fmt.Sprintf("%d/%d", c.CurrentNodeCount, c.TargetNodeCount),
			dash(c.ProvisioningState), dash(c.AllocationState),
		})
	}
	table(w, []string{"NAME", "TYPE", "SIZE", "TIER", "LOCATION", "MIN", "MAX", "NODES", "PROVISIONING", "ALLOCATION"}, rows)
}

func (p *printer) computeDetails(w io.Writer, c *api.Compute) {
	n := c.NodeStateCounts
	lines := []kv{
		{"name", c.Name},
		{"type", c.Type},
		{"workspace", c.Workspace},
		{"description", c.Description},
		{"location", c.Location},
		{"runtime", c.Runtime},
		{"size", c.Size},
		{"tier", c.Tier},
		{"min_instances", itoa(c.MinInstances)},
		{"max_instances", itoa(c.MaxInstances)},
		{"idle_time_before_scale_down", fmt.Sprintf("%ds", c.IdleTimeBeforeScaleDown)},
		{"provisioning_state", c.ProvisioningState},
		{"allocation_state", c.AllocationState},
		{"current_node_count", itoa(c.CurrentNodeCount)},
		{"target_node_count", itoa(c.TargetNodeCount)},
		{"node_state_counts", fmt.Sprintf("idle=%d running=%d preparing=%d unusable=%d leaving=%d preempted=%d",
			n.Idle, n.Running, n.Preparing, n.Unusable, n.Leaving, n.Preempted)},
		{"tags", joinMap(c.Tags)},
		{"cost", costLine(c.Cost)},
		{"created_on", p.when(c.CreatedOn)},
		{"modified_on", p.when(c.ModifiedOn)},
	}
	if c.Instance != nil || c.VirtualMachine != nil || c.Kubernetes != nil {
		// A compute instance or an attached machine is one node, and an
		// attached cluster gives each job Pods of its own: the cluster's
		// scale lines do not apply.
		lines = slices.DeleteFunc(lines, func(l kv) bool {
			switch l.k {
			case "tier", "min_instances", "max_instances", "idle_time_before_scale_down", "allocation_state", "current_node_count", "target_node_count":
				return true
			case "size", "runtime", "location":
				return c.VirtualMachine != nil || c.Kubernetes != nil
			case "node_state_counts":
				return c.Instance != nil
			}
			return false
		})
	}
	if c.SSHSettings != nil && c.SSHSettings.AdminUsername != "" {
		lines = append(lines, kv{"ssh_admin_username", c.SSHSettings.AdminUsername})
	}
	if c.Identity != nil {
		lines = append(lines, kv{"identity", c.Identity.Type})
	}
	if c.Instance != nil {
		lines = append(lines, p.instanceDetails(c)...)
	}
	if c.VirtualMachine != nil {
		lines = append(lines, machineDetails(c)...)
	}
	if c.Kubernetes != nil {
		lines = append(lines, kubernetesDetails(c)...)
	}
	if c.Tide != nil {
		for i, s := range c.Tide.Schedules {
			lines = append(lines, kv{fmt.Sprintf("tide.schedules[%d]", i), describeSchedule("", s, p)})
		}
	}
	details(w, lines)
	for _, e := range c.Errors {
		fmt.Fprintf(w, "error: %s: %s\n", e.Code, e.Message)
	}
}

// quotedMap is joinMap with values that hold spaces or line breaks
// quoted, so each entry stays on the line (logged params, tags).
func quotedMap(m map[string]string) string {
	q := make(map[string]string, len(m))
	for k, v := range m {
		if strings.ContainsAny(v, " \t\r\n\"") {
			v = strconv.Quote(v)
		}
		q[k] = v
	}
	return joinMap(q)
}

func joinMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

func sizeTable(w io.Writer, sizes []api.Size) {
	rows := make([][]string, 0, len(sizes))
	for _, s := range sizes {
		low := "no"
		if s.LowPriorityCapable {
			low = "yes"
		}
		gpus := itoa(s.GPUs)
		if s.GPUType != "" {
			gpus += " x " + s.GPUType
		}
		rows = append(rows, []string{s.Name, s.Family, itoa(s.VCPUs), ftoa(s.MemoryGB), gpus, low, fmt.Sprintf("%.3f", s.PricePerHour)})
	}
	table(w, []string{"NAME", "FAMILY", "VCPUS", "MEMORY_GB", "GPUS", "LOW_PRIORITY", "PRICE_PER_HOUR"}, rows)
}

func usageTable(w io.Writer, us []api.Usage) {
	rows := make([][]string, 0, len(us))
	for _, u := range us {
		rows = append(rows, []string{u.Location, u.Family, u.Tier, itoa(u.CurrentValue), itoa(u.Limit), u.Unit})
	}
	table(w, []string{"LOCATION", "FAMILY", "TIER", "CURRENT", "LIMIT", "UNIT"}, rows)
}

func (p *printer) nodeTable(w io.Writer, ns []api.Node) {
	rows := make([][]string, 0, len(ns))
	for _, n := range ns {
		cpu, mem := "-", "-"
		if u := n.Utilization; u != nil {
			cpu, mem = fmt.Sprintf("%.0f%%", u.CPUPercent), bytesize(u.MemoryBytes)
			if u.GPUPercent != nil {
				cpu += fmt.Sprintf(" gpu %.0f%%", *u.GPUPercent)
			}
		}
		cache := "-"
		if c := n.Cache; c != nil {
			// What the node's input cache holds, and how many inputs it
			// served of those asked for.
			cache = fmt.Sprintf("%s %d/%d", bytesize(c.Bytes), c.Hits, c.Hits+c.Misses)
		}
		rows = append(rows, []string{n.ID, n.State, dash(n.Job), p.ago(n.CreatedOn), p.ago(n.StateSince), cpu, mem, cache, dash(n.Error)})
	}
	table(w, []string{"NODE", "STATE", "JOB", "AGE", "IN_STATE", "CPU", "MEMORY", "CACHE", "ERROR"}, rows)
}

func (p *printer) eventTable(w io.Writer, es []api.Event) {
	rows := make([][]string, 0, len(es))
	for _, e := range es {
		rows = append(rows, []string{e.Time.In(p.loc).Format(time.DateTime), e.Kind, e.Message})
	}
	table(w, []string{"TIME", "KIND", "MESSAGE"}, rows)
}

func locationTable(w io.Writer, ls []api.Location) {
	rows := make([][]string, 0, len(ls))
	for _, l := range ls {
		def := ""
		if l.Default {
			def = "*"
		}
		rows = append(rows, []string{l.Name, l.Provider, dash(l.Runtime), def})
	}
	table(w, []string{"NAME", "PROVIDER", "RUNTIME", "DEFAULT"}, rows)
}

func (p *printer) workspaceTable(w io.Writer, ws []api.Workspace) {
	rows := make([][]string, 0, len(ws))
	for _, x := range ws {
		rows = append(rows, []string{x.Name, dash(x.Description), p.ago(x.CreatedOn)})
	}
	table(w, []string{"NAME", "DESCRIPTION", "AGE"}, rows)
}

// jobDuration is how long a job ran (or has been running), or "-".
func (p *printer) jobDuration(j *api.Job) string {
	switch {
	case j.StartTime.IsZero():
		return "-"
	case j.EndTime.IsZero():
		return age(p.now.Sub(j.StartTime))
	default:
		return age(j.EndTime.Sub(j.StartTime))
	}
}

func (p *printer) jobTable(w io.Writer, js []api.Job) {
	rows := make([][]string, 0, len(js))
	for i := range js {
		j := &js[i]
		waiting := ""
		if j.Status == api.JobQueued {
			waiting = j.PendingReason
			if j.QueuePosition > 0 {
				waiting = fmt.Sprintf("#%d: %s", j.QueuePosition, waiting)
			}
		}
		rows = append(rows, []string{j.Name, j.Status, jobCompute(j), p.ago(j.CreatedOn), p.jobDuration(j), dash(j.DisplayName), dash(waiting)})
	}
	table(w, []string{"NAME", "STATUS", "COMPUTE", "AGE", "DURATION", "DISPLAY_NAME", "WAITING_FOR"}, rows)
}

func (p *printer) jobDetails(w io.Writer, j *api.Job) {
	exit := ""
	if j.ExitCode != nil {
		exit = itoa(*j.ExitCode)
	}
	lines := []kv{
		{"name", j.Name},
		{"display_name", j.DisplayName},
		{"experiment_name", j.ExperimentName},
		{"status", j.Status},
		{"compute", jobComputeDetail(j)},
		{"instance_count", itoa(j.InstanceCount())},
		{"distribution", jobDistribution(j.Distribution)},
		{"environment", jobEnvironment(j)},
		{"attempt", nonZero(j.Attempt)},
		{"priority", itoa(j.Priority())},
		{"created_on", p.when(j.CreatedOn)},
		{"start_time", p.when(j.StartTime)},
		{"end_time", p.when(j.EndTime)},
	}
	if !j.StartTime.IsZero() {
		lines = append(lines, kv{"duration", p.jobDuration(j)})
	}
	lines = append(lines, kv{"cost", costLine(j.Cost)}, kv{"usage", usageLine(j.Usage)}, kv{"exit_code", exit}, kv{"error", j.Error})
	if r := j.Retried; r.NodeFailure+r.ExitCode > 0 {
		onNode, onExit := j.RetryLimits()
		lines = append(lines, kv{"retried", fmt.Sprintf("%d/%d after node failures, %d/%d after non-zero exits", r.NodeFailure, onNode, r.ExitCode, onExit)})
	}
	if !api.JobTerminal(j.Status) && j.PendingReason != "" {
		lines = append(lines, kv{"pending_reason", fmt.Sprintf("%s (%s)", j.PendingReason, p.ago(j.CreatedOn))})
	}
	if j.QueuePosition > 0 {
		lines = append(lines, kv{"queue_position", fmt.Sprintf("%d (%d job(s) ahead on %s)", j.QueuePosition, j.QueuePosition-1, j.Compute)})
	}
	if len(j.Metrics) > 0 {
		var ms []string
		for _, name := range sortedKeys(j.Metrics) {
			ms = append(ms, name+"="+strconv.FormatFloat(j.Metrics[name], 'g', -1, 64))
		}
		lines = append(lines, kv{"metrics", strings.Join(ms, " ")})
	}
	lines = append(lines, kv{"params", quotedMap(j.Params)}, kv{"tags", quotedMap(j.Tags)})
	if j.Type == api.JobTypePipeline {
		details(w, lines)
		p.pipelineSteps(w, j)
		return
	}
	if j.Type == api.JobTypeSweep {
		details(w, append(lines, sweepLines(j)...))
		p.sweepTrials(w, j)
		return
	}
	switch {
	case j.Parent != "" && j.Parameters != nil:
		lines = append(lines, kv{"sweep", j.Parent}, kv{"parameters", sweep.FormatParams(j.Parameters)})
	case j.Parent != "":
		lines = append(lines, kv{"pipeline", j.Parent + " (step " + j.Step + ")"})
	}
	lines = append(lines, kv{"command", oneLine(j.Command)})
	details(w, lines)
	for i, rk := range j.Ranks {
		s := fmt.Sprintf("node %s %s", rk.Node, dash(rk.Status))
		if rk.ExitCode != nil {
			s += fmt.Sprintf(" exit code %d", *rk.ExitCode)
		}
		if rk.Error != "" {
			s += ": " + rk.Error
		}
		fmt.Fprintf(w, "rank %d: %s\n", i, s)
	}
	if j.Status == api.JobFailed && len(j.LogTail) > 0 {
		fmt.Fprintln(w, "log tail:")
		for _, l := range j.LogTail {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

func nonZero(i int) string {
	if i == 0 {
		return ""
	}
	return itoa(i)
}

// oneLine shortens a multi-line command for a key/value view.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// latestEvents prints the last few events under a resource's details.
func (p *printer) latestEvents(w io.Writer, es []api.Event, more string) {
	if len(es) == 0 {
		return
	}
	const n = 5
	fmt.Fprintf(w, "\nlatest events (all: %s):\n", more)
	p.eventTable(w, es[max(len(es)-n, 0):])
}

// costLine prints a cost: amount, node-hours and price.
func costLine(c *api.Cost) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("$%.2f (%.2f node-hours at $%.4f/hour)", c.Amount, c.NodeHours, c.PricePerHour)
}

// usageLine prints what a job used: CPU time, peak memory, GPU.
func usageLine(u *api.JobUsage) string {
	if u == nil {
		return ""
	}
	s := fmt.Sprintf("cpu %.1f s, peak memory %s, disk %s", u.CPUSeconds, bytesize(u.PeakMemoryBytes), bytesize(u.DiskBytes))
	if u.GPUPercent != nil {
		s += fmt.Sprintf(", gpu %.0f%% (peak memory %s)", *u.GPUPercent, bytesize(u.GPUMemoryBytes))
	}
	return s
}

// jobCompute names where a job runs, for tables: its compute, or
// "serverless" for a job on nodes of its own.
func jobCompute(j *api.Job) string {
	if j.Serverless != nil && j.Serverless.Kubernetes != "" {
		return j.Serverless.Kubernetes
	}
	if j.Serverless != nil {
		return "serverless"
	}
	return j.Compute
}

// jobComputeDetail is jobCompute with a serverless job's nodes.
func jobComputeDetail(j *api.Job) string {
	sl := j.Serverless
	if sl == nil {
		return j.Compute
	}
	if sl.Kubernetes != "" {
		return fmt.Sprintf("%s (Kubernetes): %d Pod(s) of instance type %s, its own (compute %s)", sl.Kubernetes, sl.InstanceCount, sl.InstanceType, j.Compute)
	}
	return fmt.Sprintf("serverless: %d × %s (%s, location %s; nodes of its own, compute %s)", sl.InstanceCount, sl.InstanceType, sl.Tier, sl.Location, j.Compute)
}
