package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
)

func (r *run) computeHistory() *cobra.Command {
	var since string
	var points int
	cmd := &cobra.Command{
		Use:   "history NAME [--since 6h] [--points 24]",
		Short: "A compute's nodes by state, jobs and utilisation over time",
		Long: `The controller records each compute's state once a minute and keeps a
week. Each row is a time bucket: the most nodes and jobs seen in it (so short
peaks show) and the nodes' mean CPU (percent of one core, added up over the
nodes) and most memory.`,
		Example: "  tide compute history gpu-cluster --since 7d --points 28",
		Args:    r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				hs, err := cl.ComputeHistory(ctx, r.workspace, args[0], since, points)
				if err != nil {
					return err
				}
				p := r.printer()
				return p.print(hs, func(w io.Writer) { p.historyTable(w, hs) })
			})
		},
	}
	cmd.Flags().StringVar(&since, "since", "24h", "from this time (RFC 3339) or this long ago (6h, 7d)")
	cmd.Flags().IntVar(&points, "points", 24, "at most this many rows")
	return cmd
}

func (p *printer) historyTable(w io.Writer, hs []api.ComputeSample) {
	if len(hs) == 0 {
		fmt.Fprintln(w, "No samples yet: the controller records one a minute.")
		return
	}
	rows := make([][]string, 0, len(hs))
	for _, h := range hs {
		n := h.Nodes
		rows = append(rows, []string{p.when(h.Time), itoa(n.Idle + n.Running + n.Preparing), itoa(n.Running), itoa(n.Idle), itoa(n.Preparing),
			itoa(h.Queued), itoa(h.Running), fmt.Sprintf("%.0f%%", h.CPUPercent), bytesize(h.MemoryBytes)})
	}
	table(w, []string{"TIME", "NODES", "BUSY", "IDLE", "STARTING", "QUEUED", "RUNNING", "CPU", "MEMORY"}, rows)
}
