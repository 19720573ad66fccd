package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// instanceVerbs are start, stop and restart, as az ml compute has them.
func (r *run) instanceVerbs() []*cobra.Command {
	var out []*cobra.Command
	for _, v := range []struct{ op, short string }{
		{api.OperationStart, "Start a stopped compute instance (its files are as it left them)"},
		{api.OperationStop, "Stop a compute instance; its disk (home folder, installed packages) is kept"},
		{api.OperationRestart, "Restart a compute instance (its startup script runs again)"},
	} {
		out = append(out, &cobra.Command{
			Use:   strings.ToLower(v.op) + " NAME",
			Short: v.short,
			Args:  r.exactArgs("NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := r.client()
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
				defer cancel()
				c, err := cl.InstanceOperation(ctx, r.workspace, args[0], v.op)
				if err != nil {
					return err
				}
				p := r.printer()
				return p.print(c, func(w io.Writer) {
					fmt.Fprintf(w, "%s requested for compute instance %s (now %s); follow it with tide compute show %s\n", strings.ToLower(v.op), c.Name, c.Instance.State, c.Name)
				})
			},
		})
	}
	return out
}

// inlineScripts reads an instance's setup script files (path, relative to
// the YAML file) into the request: the server cannot read them.
func inlineScripts(file string, c *api.Compute) error {
	if c.Instance == nil || c.SetupScripts == nil {
		return nil
	}
	base := "."
	if file != "" && file != "-" {
		base = filepath.Dir(file)
	}
	for field, s := range map[string]*api.SetupScript{"setup_scripts.creation_script": c.SetupScripts.CreationScript, "setup_scripts.startup_script": c.SetupScripts.StartupScript} {
		if s == nil || s.Path == "" {
			continue
		}
		p := s.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return spec.Errors{{File: file, Field: field + ".path", Message: fmt.Sprintf("%v; the path is relative to the YAML file", err)}}
		}
		s.Content = string(b)
	}
	return nil
}

// instanceDetails are the lines show adds for an instance.
func (p *printer) instanceDetails(c *api.Compute) []kv {
	in := c.Instance
	lines := []kv{{"state", in.State}}
	if op := in.LastOperation; op != nil {
		s := fmt.Sprintf("%s %s (%s, %s)", op.OperationName, op.OperationStatus, op.OperationTrigger, p.when(op.OperationTime))
		if op.Reason != "" {
			s += ": " + op.Reason
		}
		lines = append(lines, kv{"last_operation", s})
	}
	if u := in.CreateOnBehalfOf; u != nil {
		lines = append(lines, kv{"assigned_user", fmt.Sprintf("object id %s (tenant %s)", u.UserObjectID, u.UserTenantID)})
	}
	if in.IdleTimeBeforeShutdownMinutes > 0 {
		lines = append(lines, kv{"idle_time_before_shutdown", fmt.Sprintf("%dm", in.IdleTimeBeforeShutdownMinutes)})
	} else if in.IdleTimeBeforeShutdown != "" {
		lines = append(lines, kv{"idle_time_before_shutdown", in.IdleTimeBeforeShutdown})
	}
	if in.Schedules != nil {
		for i, s := range in.Schedules.ComputeStartStop {
			lines = append(lines, kv{fmt.Sprintf("schedule[%d]", i), describeSchedule(s.Action, s, p)})
		}
	}
	for _, a := range in.Applications {
		v := a.EndpointURI
		if !a.Available {
			v = "unavailable: " + a.Reason
		}
		lines = append(lines, kv{"application " + a.DisplayName, v})
	}
	for _, r := range in.Setup {
		v := r.Status
		if r.ExitCode != nil {
			v += fmt.Sprintf(" (exit %d)", *r.ExitCode)
		}
		if r.Error != "" {
			v += ": " + r.Error
		}
		if r.Status == "Failed" && r.Log != "" {
			v += "\n" + strings.TrimRight(indent(lastLines(r.Log, 20)), "\n")
		}
		lines = append(lines, kv{r.Script, v})
	}
	if cn := in.Connection; cn != nil {
		lines = append(lines, kv{"node", cn.Node}, kv{"address", cn.Address}, kv{"ssh", cn.SSH})
	}
	if a := in.Activity; a != nil {
		lines = append(lines, kv{"activity", fmt.Sprintf("CPU %.1f %%, %d kernel(s) (%d busy, %d connection(s)), %d SSH session(s)",
			a.CPUPercent, a.Kernels, a.KernelsBusy, a.Connections, a.SSHSessions)})
	}
	return lines
}

func describeSchedule(action string, s api.StartStopSchedule, p *printer) string {
	t := s.Trigger
	what := action
	if s.MaxInstances != nil || s.MinInstances != nil {
		var parts []string
		if s.MinInstances != nil {
			parts = append(parts, fmt.Sprintf("min_instances=%d", *s.MinInstances))
		}
		if s.MaxInstances != nil {
			parts = append(parts, fmt.Sprintf("max_instances=%d", *s.MaxInstances))
		}
		what = "set " + strings.Join(parts, " ")
	}
	when := ""
	if t != nil {
		when = t.Expression
		if t.Type == "recurrence" {
			when = fmt.Sprintf("every %d %s", max(t.Interval, 1), t.Frequency)
			if t.Schedule != nil {
				when += fmt.Sprintf(" at hours %v minutes %v", t.Schedule.Hours, t.Schedule.Minutes)
				if len(t.Schedule.WeekDays) > 0 {
					when += " on " + strings.Join(t.Schedule.WeekDays, ",")
				}
			}
		}
		tz := t.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		when += " (" + tz + ")"
	}
	s2 := what + " " + when
	if s.State == "disabled" {
		s2 += ", disabled"
	} else if !s.NextRun.IsZero() {
		s2 += ", next " + p.when(s.NextRun)
	}
	return s2
}

// lastLines keeps the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
