package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
)

// requestTimeout bounds one plain API call (not streams or downloads).
const requestTimeout = time.Minute

func (r *run) computeCommand() *cobra.Command {
	return group("compute", "Manage compute clusters and instances (like az ml compute)", append([]*cobra.Command{
		r.computeCreate(), r.computeAttach(), r.computeShow(), r.computeList(), r.computeUpdate(), r.computeDelete(), r.computeDetach(),
		r.computeListSizes(), r.computeListUsage(), r.computeListNodes(), r.computeHistory(), r.computeEvents(), r.computePreemptNode(),
		r.computeConnectSSH(), r.computeSSHProxy(),
	}, r.instanceVerbs()...)...)
}

func (r *run) computeCreate() *cobra.Command {
	var (
		file, name string
		sets       []string
		flags      = map[string]*string{}
	)
	cmd := &cobra.Command{
		Use:   "create [-f FILE] [--name NAME] [--type TYPE --size SIZE ...] [--set key=value ...]",
		Short: "Create or update a compute from an Azure ML compute YAML file or az ml's flags",
		Long: `Create a compute from the YAML file 'az ml compute create -f' reads, or from
az ml's flags alone (--name and --type, then --size, --min-instances, ...),
or update it when one of that name exists. Flags override the file's fields.
Provisioning continues on the server; 'tide compute show NAME' tells how far
it got.`,
		Example: `  tide compute create -f cluster.yml --set max_instances=4
  tide compute create --name cpu-training-cluster --type AmlCompute --size Standard_DS3_v2 \
    --min-instances 0 --max-instances 4 --idle-time-before-scale-down 180`,
		Args: r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var data []byte
			if file != "" {
				var err error
				if data, err = r.readSpecFile(file); err != nil {
					return err
				}
			} else if !changed(cmd, "type") || name == "" {
				return usagef("name a compute file with -f, or give at least --name and --type (as az ml compute create does)")
			}
			c, err := parseCompute(file, data, nameSet(name, computeFlagSets(cmd, flags, sets)))
			if err != nil {
				return err
			}
			return r.putCompute(cmd.Context(), file, c)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "compute YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "compute name (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set max_instances=4 (repeatable)")
	addComputeFlags(cmd, flags)
	return cmd
}

func (r *run) computeShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a compute and its status",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			c, err := cl.Compute(ctx, r.workspace, args[0])
			if err != nil {
				return err
			}
			es, _ := cl.ComputeEvents(ctx, r.workspace, args[0]) // details without events beat an error
			p := r.printer()
			return p.print(c, func(w io.Writer) {
				p.computeDetails(w, c)
				p.latestEvents(w, es, "tide compute events "+c.Name)
			})
		},
	}
}

func (r *run) computeList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the computes of the workspace",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			cs, err := cl.Computes(ctx, r.workspace)
			if err != nil {
				return err
			}
			return r.printer().print(cs, func(w io.Writer) { computeTable(w, cs) })
		},
	}
}

func (r *run) computeUpdate() *cobra.Command {
	var (
		minN, maxN, idle int
		desc             string
	)
	cmd := &cobra.Command{
		Use:   "update NAME [--min-instances N] [--max-instances N] [--idle-time-before-scale-down S] [--description D]",
		Short: "Change a compute's scale settings or description",
		Long: `Change the settings that may change while a compute runs. Size, tier and
location cannot change; delete and recreate the compute for that.`,
		Args: r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p api.ComputePatch
			if changed(cmd, "min-instances") {
				p.MinInstances = &minN
			}
			if changed(cmd, "max-instances") {
				p.MaxInstances = &maxN
			}
			if changed(cmd, "idle-time-before-scale-down") {
				p.IdleTimeBeforeScaleDown = &idle
			}
			if changed(cmd, "description") {
				p.Description = &desc
			}
			if p == (api.ComputePatch{}) {
				return usagef("nothing to update: pass --min-instances, --max-instances, --idle-time-before-scale-down or --description")
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			c, err := cl.PatchCompute(ctx, r.workspace, args[0], p)
			if err != nil {
				return err
			}
			pr := r.printer()
			return pr.print(c, func(w io.Writer) { pr.computeDetails(w, c) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&minN, "min-instances", 0, "minimum number of nodes")
	f.IntVar(&maxN, "max-instances", 0, "maximum number of nodes")
	f.IntVar(&idle, "idle-time-before-scale-down", 0, "seconds a node stays idle before it is removed")
	f.StringVar(&desc, "description", "", "description")
	return cmd
}

func (r *run) computeDelete() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME [--yes]",
		Short: "Delete a compute and its nodes",
		Long: `Delete a compute. Its nodes are stopped; jobs running on them fail.
Asks for confirmation on a terminal; pass --yes in scripts.`,
		Args: r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !yes {
				ok, err := r.confirm(fmt.Sprintf("Delete compute %s and stop its nodes? [y/N]: ", name))
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintln(r.app.Stderr, "Not deleted.")
					return nil
				}
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			if err := cl.DeleteCompute(ctx, r.workspace, name); err != nil {
				return err
			}
			if r.output == "table" {
				fmt.Fprintf(r.app.Stdout, "Deleted compute %s.\n", name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// confirm asks a yes/no question on a terminal. Without a terminal it
// refuses: a script that forgot --yes must not hang or delete by accident.
func (r *run) confirm(question string) (bool, error) {
	if !isTerminal(r.app.Stdin) {
		return false, usagef("%s: refusing to delete without confirmation because standard input is not a terminal; pass --yes", r.cmd.CommandPath())
	}
	fmt.Fprint(r.app.Stderr, question)
	line, err := bufio.NewReader(r.app.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

func (r *run) computeListSizes() *cobra.Command {
	return &cobra.Command{
		Use:   "list-sizes",
		Short: "List the VM sizes computes can use",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			sizes, err := cl.Sizes(ctx)
			if err != nil {
				return err
			}
			return r.printer().print(sizes, func(w io.Writer) { sizeTable(w, sizes) })
		},
	}
}

func (r *run) computeListUsage() *cobra.Command {
	var location string
	cmd := &cobra.Command{
		Use:   "list-usage [--location L]",
		Short: "List vCPU quota use per VM family, tier and location",
		Long: `List the vCPUs computes reserve (max_instances x the size's vCPUs) against
the quota of their VM family, tier and location, as 'az ml compute list-usage' does.`,
		Args: r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			us, err := cl.Usages(ctx, location)
			if err != nil {
				return err
			}
			return r.printer().print(us, func(w io.Writer) { usageTable(w, us) })
		},
	}
	cmd.Flags().StringVarP(&location, "location", "l", "", "only this location")
	return cmd
}

func (r *run) computeListNodes() *cobra.Command {
	return &cobra.Command{
		Use:   "list-nodes NAME",
		Short: "List the nodes of a compute",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			ns, err := cl.Nodes(ctx, r.workspace, args[0])
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(ns, func(w io.Writer) {
				p.nodeTable(w, ns)
				nodeConnections(w, ns)
			})
		},
	}
}

// nodeConnections prints how to reach each node with OpenSSH (or why one
// cannot), after the node table.
func nodeConnections(w io.Writer, ns []api.Node) {
	if len(ns) == 0 {
		return
	}
	fmt.Fprintln(w)
	if why, ok := strings.CutPrefix(ns[0].Connection, "no SSH: "); ok {
		fmt.Fprintf(w, "SSH: none (%s)\n", why)
		return
	}
	fmt.Fprintln(w, "SSH (or tide compute connect-ssh NAME --node-id NODE):")
	for _, n := range ns {
		fmt.Fprintf(w, "  %s\n", n.Connection)
	}
}

func (r *run) computeEvents() *cobra.Command {
	return &cobra.Command{
		Use:   "events NAME",
		Short: "Show what happened to a compute (scaling decisions, node starts and failures)",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			es, err := cl.ComputeEvents(ctx, r.workspace, args[0])
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(es, func(w io.Writer) { p.eventTable(w, es) })
		},
	}
}

func (r *run) computePreemptNode() *cobra.Command {
	return &cobra.Command{
		Use:   "preempt-node COMPUTE NODE",
		Short: "Preempt a low-priority node, as a cloud eviction would (to test that jobs resume)",
		Long: `Take a node of a low_priority compute away the way a cloud evicts a spot VM: the
node shows preempted, its job gets SIGTERM and the server's preempt_grace
(default 30s) to save $TIDE_CHECKPOINT_DIR, and is retried on another node
from that checkpoint (tide.retries.on_node_failure, default 3). The server
setting preemption_rate does the same at random.`,
		Args: r.exactArgs("COMPUTE", "NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			n, err := cl.PreemptNode(ctx, r.workspace, args[0], args[1])
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(n, func(w io.Writer) {
				fmt.Fprintf(w, "node %s is %s", n.ID, n.State)
				if n.Job != "" {
					fmt.Fprintf(w, "; its job %s gets the eviction notice", n.Job)
				}
				fmt.Fprintln(w)
			})
		},
	}
}
