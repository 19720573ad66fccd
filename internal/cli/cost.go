package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
)

func (r *run) costCommand() *cobra.Command {
	var by, since string
	cmd := &cobra.Command{
		Use:   "cost [--by compute|node|workspace|job|tag|user] [--since 7d]",
		Short: "What the workspace's nodes and jobs cost, live",
		Long: `Cost is node-hours times the node size's price per hour (Azure's
pay-as-you-go price, the low-priority price for low_priority computes, or
the price the server's configuration sets for a size). By compute, node or
workspace it counts every node's whole life, idle time included; by job,
tag or user it counts the jobs' nodes while they ran. --since takes an RFC
3339 time or a duration back from now (7d, 24h, 90m).`,
		Example: "  tide cost --by compute --since 30d\n  tide cost --by tag",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if by != "" && !slices.Contains(api.CostGroups, by) {
				return usagef("--by %s: one of %s", by, strings.Join(api.CostGroups, ", "))
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			rep, err := cl.Cost(ctx, r.workspace, by, since)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(rep, func(w io.Writer) { costTable(w, rep) })
		},
	}
	cmd.Flags().StringVar(&by, "by", "compute", "group by "+strings.Join(api.CostGroups, ", "))
	cmd.Flags().StringVar(&since, "since", "", "only cost since this time (RFC 3339) or duration back (7d, 24h)")
	return cmd
}

func costTable(w io.Writer, rep *api.CostReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tNODE-HOURS\tCOST (%s)\n", strings.ToUpper(rep.By), rep.Currency)
	for _, l := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\n", l.Key, l.NodeHours, l.Amount)
	}
	fmt.Fprintf(tw, "total\t%.2f\t%.2f\n", rep.NodeHours, rep.Total)
	tw.Flush()
	if len(rep.Rows) == 0 {
		fmt.Fprintln(w, "No node time in this period.")
	}
}
