package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
)

func (r *run) jobMetrics() *cobra.Command {
	var metric string
	cmd := &cobra.Command{
		Use:   "metrics NAME [--metric M]",
		Short: "List the metrics a job logged, by step",
		Long: `List the metric values a job logged. A job logs a metric by printing a line
to standard output, with no library needed:

  ##tide metric NAME=VALUE [NAME=VALUE ...] [step=N]

for example, in Python: print(f"##tide metric accuracy={acc} step={epoch}").
Without step=, a value's step is its index in the metric's series.
'tide job show' prints the latest value of each metric.`,
		Example: "  tide job metrics my_job --metric accuracy",
		Args:    r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			ms, err := cl.JobMetrics(ctx, r.workspace, args[0], metric)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(ms, func(w io.Writer) {
				if len(ms) == 0 {
					fmt.Fprintf(w, "Job %s logged no metrics%s (a job logs them with lines '%sNAME=VALUE').\n", args[0], metricFilter(metric), api.MetricPrefix)
					return
				}
				rows := make([][]string, 0, len(ms))
				for _, m := range ms {
					rows = append(rows, []string{m.Name, strconv.FormatInt(m.Step, 10), strconv.FormatFloat(m.Value, 'g', -1, 64), p.when(m.Time)})
				}
				table(w, []string{"METRIC", "STEP", "VALUE", "TIME"}, rows)
			})
		},
	}
	cmd.Flags().StringVarP(&metric, "metric", "m", "", "only this metric")
	return cmd
}

func metricFilter(m string) string {
	if m == "" {
		return ""
	}
	return " named " + m
}
