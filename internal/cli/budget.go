package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

func (r *run) budgetCommand() *cobra.Command {
	return group("budget", "Manage budgets: spending limits that alert, call a webhook and pause computes",
		r.budgetCreate(), r.budgetShow(), r.budgetList(), r.budgetDelete(),
	)
}

func (r *run) budgetCreate() *cobra.Command {
	var (
		file, name string
		sets       []string
	)
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name NAME] [--set key=value ...]",
		Short: "Create or replace a budget from a YAML file",
		Long: `Create a budget: a limit per period on what a compute's nodes, the jobs
carrying a tag, or the whole workspace cost. Each threshold (percent of the
amount) alerts once per period: an event, a JSON POST to the webhook (retried
with back-off), and with pause: true, at 100 % the scoped clusters'
max_instances is set to 0 and instances are stopped.

  name: gpu-monthly
  scope: {compute: gpu-cluster}   # or {tag: team=vision}; none: the workspace
  amount: 500                     # USD per period
  period: monthly                 # weekly, daily, or custom with start and end
  thresholds: [50, 80, 100]
  actions: {webhook: https://hooks.example.com/tide, pause: true}`,
		Example: "  tide budget create -f budget.yml",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := r.readSpecFile(file)
			if err != nil {
				return err
			}
			b, err := spec.ParseBudget(file, data, nameSet(name, sets))
			if err != nil {
				return err
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				out, err := cl.PutBudget(ctx, r.workspace, b)
				if err != nil {
					return err
				}
				return r.printer().print(out, func(w io.Writer) { budgetDetails(w, out) })
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "budget YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "budget name (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set amount=200 (repeatable)")
	return cmd
}

func (r *run) budgetShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a budget: spent this period and the alerts sent",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				b, err := cl.Budget(ctx, r.workspace, args[0])
				if err != nil {
					return err
				}
				return r.printer().print(b, func(w io.Writer) { budgetDetails(w, b) })
			})
		},
	}
}

func (r *run) budgetList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List budgets",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				bs, err := cl.Budgets(ctx, r.workspace)
				if err != nil {
					return err
				}
				return r.printer().print(bs, func(w io.Writer) {
					rows := make([][]string, 0, len(bs))
					for _, b := range bs {
						rows = append(rows, []string{b.Name, budgetScope(b.Scope), b.Period, fmt.Sprintf("%.2f", b.Amount), fmt.Sprintf("%.2f", b.Spent), itoa(len(b.Alerts))})
					}
					table(w, []string{"NAME", "SCOPE", "PERIOD", "AMOUNT", "SPENT", "ALERTS"}, rows)
				})
			})
		},
	}
}

func (r *run) budgetDelete() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a budget",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				if err := cl.DeleteBudget(ctx, r.workspace, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(r.app.Stdout, "Deleted budget %s.\n", args[0])
				return nil
			})
		},
	}
}

func budgetScope(s api.BudgetScope) string {
	switch {
	case s.Compute != "":
		return "compute " + s.Compute
	case s.Tag != "":
		return "tag " + s.Tag
	}
	return "workspace"
}

func budgetDetails(w io.Writer, b *api.Budget) {
	th := make([]string, len(b.Thresholds))
	for i, t := range b.Thresholds {
		th[i] = fmt.Sprintf("%g%%", t)
	}
	lines := []kv{
		{"name", b.Name},
		{"scope", budgetScope(b.Scope)},
		{"amount", fmt.Sprintf("$%.2f per %s period", b.Amount, b.Period)},
		{"thresholds", strings.Join(th, ", ")},
		{"webhook", b.Actions.Webhook},
		{"pause", fmt.Sprint(b.Actions.Pause)},
		{"spent", fmt.Sprintf("$%.2f since %s", b.Spent, b.PeriodStart.Format("2006-01-02"))},
	}
	for _, a := range b.Alerts {
		s := fmt.Sprintf("%g%% at %s ($%.2f)", a.Threshold, a.Time.Format("2006-01-02 15:04:05"), a.Spent)
		if len(a.Paused) > 0 {
			s += ", paused " + strings.Join(a.Paused, ", ")
		}
		if a.Webhook != "" {
			s += ", webhook " + a.Webhook
		}
		lines = append(lines, kv{"alert", s})
	}
	details(w, lines)
}
