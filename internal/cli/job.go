package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/simulate"
	"github.com/tideml/tide/internal/spec"
)

func (r *run) jobCommand() *cobra.Command {
	return group("job", "Submit and follow command jobs (like az ml job)",
		r.jobCreate(), r.jobShow(), r.jobList(), r.jobStream(), r.jobCancel(), r.jobDownload(), r.jobEvents(), r.jobMetrics(),
	)
}

const streamExitHelp = `
'stream' exits 0 when the job completed and 1 when it failed or was
canceled, after a summary line on standard error. The job's log goes to
standard output; status changes and waiting reasons go to standard error.`

func (r *run) jobCreate() *cobra.Command {
	var (
		file, name string
		sets       []string
		stream     bool
	)
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name NAME] [--set key=value ...] [--stream]",
		Short: "Submit a command job from an Azure ML job YAML file",
		Long: `Submit the command job the YAML file describes (the file 'az ml job create -f'
reads). Without a name in the file or --name, the server generates one.
With --stream, follow the job's log until it ends.` + streamExitHelp,
		Example: "  tide job create -f job.yml --set inputs.epochs=3 --stream",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := r.readSpecFile(file)
			if err != nil {
				return err
			}
			j, err := parseJob(file, data, nameSet(name, sets))
			if err != nil {
				return err
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			// The server checks everything it can (compute, environment,
			// datastores, name) before code and data go up, and says
			// every problem at once. (A pipeline's steps and a sweep's
			// component trial are prepared from local files first.)
			if j.Type == api.JobTypeCommand || j.Type == api.JobTypeSweep && j.Trial.Component == nil {
				vctx, vcancel := context.WithTimeout(cmd.Context(), requestTimeout)
				err = cl.ValidateJob(vctx, r.workspace, j)
				vcancel()
				if err != nil {
					return err
				}
			}
			switch j.Type {
			case api.JobTypePipeline:
				err = r.preparePipeline(cmd.Context(), cl, file, j)
			case api.JobTypeSweep:
				err = r.prepareSweep(cmd.Context(), cl, file, j)
			default:
				err = r.uploadData(cmd.Context(), cl, file, j)
			}
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			out, err := cl.CreateJob(ctx, r.workspace, j)
			if err != nil {
				return err
			}
			if stream && out.Type == api.JobTypeSweep {
				fmt.Fprintf(r.app.Stderr, "Sweep %s submitted (up to %d trials, %d at once).\n", out.Name, spec.SweepMaxTrials(out), spec.SweepMaxConcurrent(out))
				return r.streamSweep(cmd.Context(), cl, out.Name)
			}
			if stream && out.Type == api.JobTypePipeline {
				fmt.Fprintf(r.app.Stderr, "Pipeline %s submitted (%d steps).\n", out.Name, len(out.Steps))
				return r.streamPipeline(cmd.Context(), cl, out.Name)
			}
			if stream {
				fmt.Fprintf(r.app.Stderr, "Job %s submitted to %s.\n", out.Name, jobComputeDetail(out))
				return r.streamJob(cmd.Context(), cl, out.Name)
			}
			p := r.printer()
			return p.print(out, func(w io.Writer) { p.jobDetails(w, out) })
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "job YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "job name (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set inputs.epochs=3 (repeatable)")
	cmd.Flags().BoolVarP(&stream, "stream", "s", false, "follow the job's log until it ends")
	return cmd
}

func (r *run) jobShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a job: status, compute, times, exit code, error and why it waits",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			j, err := cl.Job(ctx, r.workspace, args[0])
			if err != nil {
				return err
			}
			es, _ := cl.JobEvents(ctx, r.workspace, args[0]) // details without events beat an error
			p := r.printer()
			return p.print(j, func(w io.Writer) {
				p.jobDetails(w, j)
				p.latestEvents(w, es, "tide job events "+j.Name)
			})
		},
	}
}

func (r *run) jobList() *cobra.Command {
	var (
		f      api.JobFilter
		export string
	)
	cmd := &cobra.Command{
		Use:   "list [--compute C] [--status S] [--limit N] [--oldest] [--parent PIPELINE|SWEEP] [--export-trace FILE]",
		Short: "List jobs, newest first",
		Long: `List jobs, newest first (--oldest: oldest first), at most --limit of them.
With --export-trace, write the jobs that ran as a
trace for 'tide simulate' and 'tide advise' instead (` + simulate.GenericHeader + `;
see docs/simulate.md); - writes to standard output.`,
		Args: r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			js, err := cl.Jobs(ctx, r.workspace, f)
			if err != nil {
				return err
			}
			if export != "" {
				return r.exportTrace(ctx, cl, js, export)
			}
			p := r.printer()
			return p.print(js, func(w io.Writer) { p.jobTable(w, js) })
		},
	}
	cmd.Flags().StringVar(&f.Compute, "compute", "", "only jobs on this compute (serverless: the serverless jobs)")
	cmd.Flags().StringVar(&f.Status, "status", "", "only jobs in this status (Queued, Running, Completed, ...)")
	cmd.Flags().IntVar(&f.Limit, "limit", 0, "at most this many jobs (the newest, or the oldest with --oldest)")
	cmd.Flags().BoolVar(&f.Oldest, "oldest", false, "oldest first")
	cmd.Flags().StringVar(&f.Parent, "parent", "", "list the step jobs of this pipeline job (in step order) or the trials of this sweep job")
	cmd.Flags().StringVar(&export, "export-trace", "", "write the jobs as a trace for 'tide simulate' to FILE (- for standard output)")
	return cmd
}

// exportTrace writes js as a generic trace, with each job's compute size.
func (r *run) exportTrace(ctx context.Context, cl *api.Client, js []api.Job, path string) error {
	cs, err := cl.Computes(ctx, r.workspace)
	if err != nil {
		return err
	}
	sizes := make(map[string]string, len(cs))
	for _, c := range cs {
		sizes[c.Name] = c.Size
	}
	for _, j := range js {
		if j.Serverless != nil {
			sizes[j.Compute] = j.Serverless.InstanceType
		}
	}
	w := r.app.Stdout
	var file *os.File
	if path != "-" {
		if file, err = os.Create(path); err != nil {
			return fmt.Errorf("--export-trace: %w", err)
		}
		w = file
	}
	n, err := simulate.WriteTrace(w, js, sizes, r.app.Now())
	if file != nil {
		if cerr := file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("--export-trace: %w", cerr)
		}
	}
	if err != nil {
		return err
	}
	if path != "-" {
		fmt.Fprintf(r.app.Stderr, "Wrote %d of %d jobs to %s (jobs that never started are left out).\n", n, len(js), path)
	}
	return nil
}

func (r *run) jobStream() *cobra.Command {
	return &cobra.Command{
		Use:     "stream NAME",
		Aliases: []string{"logs"},
		Short:   "Follow a job's log and status until it ends (alias: logs)",
		Long: `Follow a job's log from the start, showing status changes and, while the job
waits, what it waits for. A dropped connection or a server restart is
survived: the stream resumes where it stopped. A pipeline job's steps are
followed one after the other, in step order.` + streamExitHelp,
		Args: r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			j, err := cl.Job(ctx, r.workspace, args[0])
			cancel()
			if err == nil && j.Type == api.JobTypePipeline {
				return r.streamPipeline(cmd.Context(), cl, args[0])
			}
			if err == nil && j.Type == api.JobTypeSweep {
				return r.streamSweep(cmd.Context(), cl, args[0])
			}
			return r.streamJob(cmd.Context(), cl, args[0])
		},
	}
}

func (r *run) jobCancel() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel a job",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			j, err := cl.CancelJob(ctx, r.workspace, args[0])
			if err != nil {
				return err
			}
			return r.printer().print(j, func(w io.Writer) {
				fmt.Fprintf(w, "Job %s: %s.\n", j.Name, j.Status)
			})
		},
	}
}

func (r *run) jobEvents() *cobra.Command {
	return &cobra.Command{
		Use:   "events NAME",
		Short: "Show what happened to a job (queued, placed, preempted, requeued, ended)",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			es, err := cl.JobEvents(ctx, r.workspace, args[0])
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(es, func(w io.Writer) { p.eventTable(w, es) })
		},
	}
}
