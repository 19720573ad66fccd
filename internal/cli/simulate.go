package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/simulate"
)

// simFlags are the flags tide simulate and tide advise share.
type simFlags struct {
	trace, file        string
	columns            string
	retries            int
	sets               []string
	bootTime           time.Duration
	bootFailures       float64
	preemptionsPerHour float64
	seed               uint64
}

func (f *simFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.trace, "trace", "", "job trace: Philly CSV, generic CSV ("+simulate.GenericHeader+"), Alibaba's openb_pod_list CSV or 'tide job list --export-trace' output")
	cmd.Flags().StringVar(&f.columns, "columns", "", "read any CSV with a header: submit=COL,duration=COL (or end=COL[,start=COL]),instances=COL or gpus=COL[,size=COL]")
	cmd.Flags().IntVar(&f.retries, "retries", 3, "times a preempted job is retried before it fails (the server's tide.retries.on_node_failure)")
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "compute YAML file (the file 'tide compute create -f' reads)")
	cmd.Flags().StringArrayVar(&f.sets, "set", nil, "override a compute field: --set max_instances=100000 (repeatable)")
	cmd.Flags().DurationVar(&f.bootTime, "boot-time", 180*time.Second, "how long a new node takes to boot")
	cmd.Flags().Float64Var(&f.bootFailures, "boot-failure-rate", 0, "fraction of boots that fail (0 to 1)")
	cmd.Flags().Float64Var(&f.preemptionsPerHour, "preemptions-per-hour", 0, "preemptions per node-hour of a low_priority compute")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "seed of the simulated provider's faults")
}

// load reads the compute file and the trace and checks one against the
// other.
func (f *simFlags) load(r *run) (*simulate.Trace, simulate.Config, error) {
	if f.trace == "" {
		return nil, simulate.Config{}, usagef("--trace: required; name a job trace file")
	}
	switch {
	case f.bootTime < 0:
		return nil, simulate.Config{}, usagef("--boot-time: must be >= 0 (got %s)", f.bootTime)
	case f.bootFailures < 0 || f.bootFailures >= 1:
		return nil, simulate.Config{}, usagef("--boot-failure-rate: must be >= 0 and < 1 (got %g)", f.bootFailures)
	case f.preemptionsPerHour < 0:
		return nil, simulate.Config{}, usagef("--preemptions-per-hour: must be >= 0 (got %g)", f.preemptionsPerHour)
	case f.retries < 0 || f.retries > api.MaxRetries:
		// The server's bound on tide.retries.on_node_failure; it also
		// bounds the restarts one job can cause in the replay.
		return nil, simulate.Config{}, usagef("--retries: want a whole number from 0 to %d, as tide.retries.on_node_failure (got %d)", api.MaxRetries, f.retries)
	}
	var cols *simulate.Columns
	if f.columns != "" {
		c, err := simulate.ParseColumns(f.columns)
		if err != nil {
			return nil, simulate.Config{}, usagef("--columns: %v", err)
		}
		cols = &c
	}
	data, err := r.readSpecFile(f.file)
	if err != nil {
		return nil, simulate.Config{}, err
	}
	c, err := parseCompute(f.file, data, f.sets)
	if err != nil {
		return nil, simulate.Config{}, err
	}
	if c.Tide != nil && len(c.Tide.Schedules) > 0 {
		return nil, simulate.Config{}, usagef("%s: tide.schedules: not supported by tide simulate yet (the replay keeps min_instances and max_instances fixed); simulate a copy of the file without them", f.file)
	}
	if f.preemptionsPerHour > 0 && c.Tier != api.TierLowPriority {
		// Only low-priority nodes are preempted, in Azure and in the replay.
		return nil, simulate.Config{}, usagef("--preemptions-per-hour: compute %s is not low priority, so nothing would be preempted; add --set tier=low_priority", c.Name)
	}
	cat := catalog.Default()
	size, ok := cat.Lookup(c.Size)
	if !ok {
		return nil, simulate.Config{}, usagef("%s: size: unknown VM size %q; run 'tide compute list-sizes'", f.file, c.Size)
	}
	tf, err := os.Open(f.trace)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, simulate.Config{}, usagef("--trace %s: no such file", f.trace)
	}
	if err != nil {
		return nil, simulate.Config{}, fmt.Errorf("--trace %s: %w", f.trace, err)
	}
	defer tf.Close()
	var tr *simulate.Trace
	if cols != nil {
		tr, err = simulate.ReadTraceColumns(f.trace, tf, *cols, "columns")
	} else {
		tr, err = simulate.ReadTrace(f.trace, tf)
	}
	if err != nil {
		return nil, simulate.Config{}, &UsageError{Err: err}
	}
	if err := tr.Fit(c, cat.Lookup); err != nil {
		return nil, simulate.Config{}, &UsageError{Err: err}
	}
	retries := f.retries
	if retries == 0 {
		retries = -1 // none; Config's zero means the default
	}
	return tr, simulate.Config{
		Compute: *c, Size: size, BootTime: f.bootTime, BootFailureRate: f.bootFailures,
		PreemptionsPerHour: f.preemptionsPerHour, Retries: retries, Seed: f.seed,
	}, nil
}

func (r *run) simulateCommand() *cobra.Command {
	var (
		f      simFlags
		policy string
		plot   string
		outage string
	)
	cmd := &cobra.Command{
		Use:   "simulate --trace FILE -f COMPUTE.yml [--policy NAME] [--boot-time 180s] [--capacity-outage START+DURATION] [--plot F.svg]",
		Short: "Replay a job trace against a compute's autoscaling, offline",
		Long: `Replay a job trace on a virtual clock through tide's own scheduler and
autoscaler, with a simulated provider that boots nodes in --boot-time, and
report node-hours (busy, idle, booting), cost at the size's hourly price,
queue waits and peak nodes. Nothing is sent to a server.

Traces: the Philly trace (timestamp,duration,num_gpus,gpu_time,cluster; one
GPU per node unless the compute's size has more), the generic CSV
(` + simulate.GenericHeader + `) that 'tide job list --export-trace' writes,
Alibaba's GPU trace (openb_pod_list_*.csv; pods never scheduled are skipped
and counted; a pod gets the nodes that hold its GPUs, vCPUs and memory), and
any CSV with a header through --columns (docs/simulate.md).
Policies: fixed (Azure's idle_time_before_scale_down) and adaptive; a policy
named with --policy replaces the compute's.
--capacity-outage 1h+30m makes every node creation fail with insufficient
capacity for 30 minutes from 1 hour after the trace's first submit, as the
local location's capacity_unavailable_for does on a server; the compute backs
off as the server's controller does.`,
		Example: "  tide simulate --trace philly.csv -f cluster.yml --set max_instances=100000 --policy adaptive",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			tr, cfg, err := f.load(r)
			if err != nil {
				return err
			}
			cfg.Policy = policy
			if outage != "" {
				if cfg.CapacityOutage, err = parseOutage(outage); err != nil {
					return err
				}
			}
			if plot != "" {
				cfg.SeriesPoints = 2000
			}
			res, err := simulate.Run(tr, cfg)
			if err != nil {
				return runError(err)
			}
			if plot != "" {
				if err := writePlot(plot, res, fmt.Sprintf("%s on %s (%s)", filepath.Base(tr.File), cfg.Compute.Name, res.Policy)); err != nil {
					return err
				}
			}
			return r.printer().print(res, func(w io.Writer) {
				simTable(w, &cfg, res)
				clairvoyantLine(w, tr, &cfg, res.Failed)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&policy, "policy", "", "autoscale policy: fixed or adaptive (default: the compute's)")
	cmd.Flags().StringVar(&plot, "plot", "", "draw nodes and queued jobs over time into this SVG file")
	cmd.Flags().StringVar(&outage, "capacity-outage", "", "START+DURATION: node creations fail with insufficient capacity from START (after the trace's first submit) for DURATION, e.g. 2h+30m")
	return cmd
}

// parseOutage reads --capacity-outage START+DURATION.
func parseOutage(v string) (simulate.Outage, error) {
	start, dur, ok := strings.Cut(v, "+")
	var o simulate.Outage
	var err1, err2 error
	o.Start, err1 = time.ParseDuration(strings.TrimSpace(start))
	o.For, err2 = time.ParseDuration(strings.TrimSpace(dur))
	if !ok || err1 != nil || err2 != nil || o.Start < 0 || o.For <= 0 {
		return o, usagef("--capacity-outage %q: want START+DURATION, START from the trace's first submit (0s or more) and DURATION above 0, e.g. 2h+30m", v)
	}
	return o, nil
}

// runError classifies a simulation's error: impossible figures are the
// simulator's defect (exit 1, never printed as results), anything else a
// mistake in the input or flags (exit 2).
func runError(err error) error {
	if errors.Is(err, simulate.ErrSimulatorBug) {
		return err
	}
	return &UsageError{Err: err}
}

func writePlot(path string, res simulate.Result, title string) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if err := simulate.WritePlot(out, res, title); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

func simTable(w io.Writer, cfg *simulate.Config, r simulate.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	c := &cfg.Compute
	fmt.Fprintf(tw, "Compute:\t%s (%s, min %d, max %d, idle %ds)\n", c.Name, c.Size, c.MinInstances, c.MaxInstances, c.IdleTimeBeforeScaleDown)
	fmt.Fprintf(tw, "Policy:\t%s\n", r.Policy)
	fmt.Fprintf(tw, "Jobs:\t%d over %.1f hours%s\n", r.Jobs, r.Horizon, jobNotes(r, max(cfg.Retries, 0)))
	fmt.Fprintf(tw, "Node-hours:\t%.1f total: %.1f busy, %.1f idle, %.1f booting\n", r.NodeHours.Total, r.NodeHours.Busy, r.NodeHours.Idle, r.NodeHours.Booting)
	fmt.Fprintf(tw, "Cost:\t$%.2f at $%.4f/hour\n", r.Cost, priceOf(cfg))
	fmt.Fprintf(tw, "Wait (s):\tmean %.1f, p50 %.0f, p95 %.0f, p99 %.0f, max %.0f\n", r.Wait.Mean, r.Wait.P50, r.Wait.P95, r.Wait.P99, r.MaxWait)
	fmt.Fprintf(tw, "Cold starts:\t%.1f%% of jobs waited for a booting node\n", 100*r.ColdStartFraction)
	fmt.Fprintf(tw, "Peak nodes:\t%d\n", r.PeakNodes)
	fmt.Fprintf(tw, "Nodes:\t%d created, %d deleted, %d boot failures, %d preemptions\n", r.ScaleUps, r.ScaleDowns, r.BootFailures, r.Preemptions)
	if o := cfg.CapacityOutage; o.For > 0 {
		fmt.Fprintf(tw, "Capacity outage:\t%s to %s after the first submit: %d node creations refused\n", o.Start, o.Start+o.For, r.CapacityFailures)
	}
	tw.Flush()
}

// jobNotes says which jobs the figures leave out or did not finish. A
// preempted job is retried at most retries times, as on the server, which
// bounds the work a high --preemptions-per-hour can make one job cause.
func jobNotes(r simulate.Result, retries int) string {
	var notes []string
	if r.Failed > 0 {
		notes = append(notes, fmt.Sprintf("%d failed: preempted more than --retries %d times", r.Failed, retries))
	}
	if r.Skipped > 0 {
		notes = append(notes, fmt.Sprintf("%d rows skipped: never ran", r.Skipped))
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, "; ") + ")"
}

// clairvoyantLine prints the reference no policy can beat without waits.
// It runs every job to the end, so with failed jobs (preempted too often)
// it is not comparable, and says so.
func clairvoyantLine(w io.Writer, tr *simulate.Trace, cfg *simulate.Config, failed int) {
	h := simulate.Clairvoyant(tr, cfg.BootTime)
	note := ""
	if failed > 0 {
		note = fmt.Sprintf(" with every job finishing (%d failed above)", failed)
	}
	fmt.Fprintf(w, "Clairvoyant reference (no wait): %.1f node-hours (%.1f idle, %.1f booting), $%.2f%s\n",
		h.Total, h.Idle, h.Booting, h.Total*priceOf(cfg), note)
}

func priceOf(cfg *simulate.Config) float64 {
	if cfg.Compute.Tier == api.TierLowPriority && cfg.Size.LowPriorityPrice > 0 {
		return cfg.Size.LowPriorityPrice
	}
	return cfg.Size.PricePerHour
}

func (r *run) adviseCommand() *cobra.Command {
	var (
		f    simFlags
		goal string
	)
	cmd := &cobra.Command{
		Use:   "advise --trace FILE -f COMPUTE.yml [--goal \"mean wait under 60s\"]",
		Short: "Recommend autoscale settings for a job trace: cost versus wait",
		Long: `Search the compute's settings for the cheapest that meets the goal,
simulating the trace as 'tide simulate' does: idle times from a coarse grid
(0 s to an hour) refined by bisection to 30 s, min_instances 1, 2, 4 and 8 at
the idle times around the goal, and the adaptive policy. The search runs on
the first two thirds of the trace (by time); the recommendation is then
replayed on the last third, which the search never saw, and its confidence
says whether the goal held there. Every setting tried is printed cheapest
first, with the cost-versus-wait frontier marked (*).`,
		Example: "  tide advise --trace history.csv -f cluster.yml --goal \"p95 wait under 5m\"",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := simulate.ParseGoal(goal)
			if err != nil {
				return usagef("--goal: %v", err)
			}
			tr, cfg, err := f.load(r)
			if err != nil {
				return err
			}
			adv, err := simulate.Advise(tr, cfg, g)
			if err != nil {
				return runError(err)
			}
			return r.printer().print(adv, func(w io.Writer) {
				adviceTable(w, &cfg, adv, tr.Skipped)
				clairvoyantLine(w, tr, &cfg, 0)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&goal, "goal", "mean wait under 60s", "what the recommendation must meet: STAT wait under DURATION (STAT mean, p50, p95, p99)")
	return cmd
}

func adviceTable(w io.Writer, cfg *simulate.Config, adv simulate.Advice, skipped int) {
	fmt.Fprintf(w, "Searched on %s%s.\n", adv.Fit, jobNotes(simulate.Result{Skipped: skipped}, 0))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tSETTING\tNODE-HOURS\tIDLE\tBOOTING\tCOST\tMEAN WAIT\tP95 WAIT\tCOLD")
	for i, c := range adv.Candidates {
		mark := " "
		if c.Frontier {
			mark = "*"
		}
		if i == adv.Recommended {
			mark += ">"
		}
		r := c.Result
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t$%.2f\t%.1fs\t%.0fs\t%.1f%%\n", mark, c.Setting,
			r.NodeHours.Total, r.NodeHours.Idle, r.NodeHours.Booting, r.Cost, r.Wait.Mean, r.Wait.P95, 100*r.ColdStartFraction)
	}
	tw.Flush()
	rec := adv.Candidates[adv.Recommended]
	fmt.Fprintln(w, "\n* on the cost-versus-wait frontier; > recommended")
	if !adv.Met {
		fmt.Fprintf(w, "No setting meets %q; the one that waits least is %s.\n", adv.Goal, rec.Setting)
	} else {
		fmt.Fprintf(w, "Recommended for %q: %s ($%.2f).\n", adv.Goal, rec.Setting, rec.Result.Cost)
	}
	if h := adv.Holdout; h != nil {
		verdict := "meets the goal"
		if !h.Met {
			verdict = "misses the goal"
		}
		var windows []string
		for _, v := range h.Windows {
			windows = append(windows, fmt.Sprintf("%.1fs", v))
		}
		fmt.Fprintf(w, "On the last %d jobs, which the search did not see: mean wait %.1fs, p95 %.0fs, $%.2f: %s (confidence %s).\n",
			h.Jobs, h.Result.Wait.Mean, h.Result.Wait.P95, h.Result.Cost, verdict, adv.Confidence)
		fmt.Fprintf(w, "In %d equal spans of that time: %s %s; the goal held in %d of them.\n",
			len(h.Windows), strings.SplitN(adv.Goal, " under", 2)[0], strings.Join(windows, ", "), h.WindowsMet)
	} else {
		fmt.Fprintf(w, "The trace is too short to hold a part back (fewer than 300 jobs): confidence untested.\n")
	}
	switch rec.Policy {
	case autoscaler.AdaptivePolicy:
		fmt.Fprintf(w, "Set in %s:  tide: {scale_down_policy: adaptive}  min_instances: %d\n", cfg.Compute.Name, rec.MinInstances)
	default:
		fmt.Fprintf(w, "Set in %s:  idle_time_before_scale_down: %d  min_instances: %d\n", cfg.Compute.Name, rec.IdleTime, rec.MinInstances)
	}
}
