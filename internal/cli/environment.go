package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

func (r *run) environmentCommand() *cobra.Command {
	return group("environment", "Manage environments (like az ml environment)",
		r.environmentCreate(), r.environmentList(), r.environmentShow(), r.environmentDelete(),
	)
}

func (r *run) environmentCreate() *cobra.Command {
	var (
		file, name, version string
		sets                []string
	)
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name NAME] [--version V] [--set key=value ...]",
		Short: "Register an environment version from an Azure ML environment YAML file",
		Long: `Register a version of an environment from the YAML file 'az ml environment
create -f' reads (name, version, image or build, conda_file, description,
tags). A conda_file path and a build.path folder (holding a Dockerfile,
uploaded) are read relative to the YAML file. Without a version the
server takes the next number. Versions are immutable.

The process runtime runs jobs on the host and cannot use an image or install
a conda file; tide's own block tells it how the host provides the
environment (and jobs' logs note what was not used):

  tide:
    python: /usr/bin/python3      # its folder first on PATH; python and python3 run it
    path: [/opt/tools/bin]        # more folders at the head of PATH
    variables: {OMP_NUM_THREADS: "1"}

Jobs name it as azureml:NAME:VERSION or azureml:NAME@latest.`,
		Example: "  tide environment create -f examples/environments/sklearn.yml",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := r.readSpecFile(file)
			if err != nil {
				return err
			}
			if version != "" {
				sets = append(append([]string(nil), sets...), "version="+version)
			}
			e, condaPath, err := spec.ParseEnvironment(file, data, nameSet(name, sets))
			if err != nil {
				return err
			}
			if condaPath != "" {
				if e.CondaFile, err = readCondaFile(file, condaPath); err != nil {
					return err
				}
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			if e.Build != nil {
				uctx, cancel := context.WithTimeout(cmd.Context(), uploadTimeout)
				e.Build.Path, err = r.uploadBuildPath(uctx, cl, fileBase(file), "build.path", e.Build.Path)
				cancel()
				if err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			out, _, err := cl.CreateEnvironment(ctx, r.workspace, e)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(out, func(w io.Writer) { p.environmentDetails(w, out) })
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "environment YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "environment name (overrides the file's)")
	cmd.Flags().StringVarP(&version, "version", "v", "", "version (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set image=python:3.11 (repeatable)")
	return cmd
}

// readCondaFile reads the conda file an environment file names, relative
// to that file (to the working folder for standard input).
func readCondaFile(file, condaPath string) (string, error) {
	p := condaPath
	if !filepath.IsAbs(p) && file != "-" {
		p = filepath.Join(filepath.Dir(file), p)
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", usagef("conda_file: %s: no such file (paths are relative to %s)", p, file)
	}
	if err != nil {
		return "", &UsageError{Err: fmt.Errorf("conda_file: %w", err)}
	}
	return string(b), nil
}

func (r *run) environmentList() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "list [--name NAME]",
		Short: "List the environments of the workspace, every version",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			es, err := cl.Environments(ctx, r.workspace, name)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(es, func(w io.Writer) { p.environmentTable(w, es) })
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "list the versions of this environment only")
	return cmd
}

// environmentArg splits NAME, NAME:VERSION or NAME@latest (an azureml:
// prefix is allowed); --version wins over the argument's version.
func environmentArg(arg, version string) (name, v string, err error) {
	ref, err := spec.ParseEnvironmentRef(arg)
	if err != nil {
		return "", "", usagef("%s: want NAME, NAME:VERSION or NAME@latest", arg)
	}
	if version != "" {
		return ref.Name, version, nil
	}
	return ref.Name, ref.Version, nil
}

func (r *run) environmentShow() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:     "show NAME[:VERSION|@latest] [--version V]",
		Short:   "Show one version of an environment (default: the latest)",
		Example: "  tide environment show sklearn:1\n  tide environment show sklearn@latest",
		Args:    r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, v, err := environmentArg(args[0], version)
			if err != nil {
				return err
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			e, err := cl.Environment(ctx, r.workspace, name, v)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(e, func(w io.Writer) { p.environmentDetails(w, e) })
		},
	}
	cmd.Flags().StringVarP(&version, "version", "v", "", "version (default: latest)")
	return cmd
}

func (r *run) environmentDelete() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "delete NAME:VERSION [--version V]",
		Short: "Delete one version of an environment; jobs that use it keep their copy",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, v, err := environmentArg(args[0], version)
			if err != nil {
				return err
			}
			if v == spec.LatestVersion && !strings.Contains(args[0], "@") {
				return usagef("%s: name the version to delete (NAME:VERSION or --version V)", args[0])
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			if err := cl.DeleteEnvironment(ctx, r.workspace, name, v); err != nil {
				return err
			}
			fmt.Fprintf(r.app.Stdout, "Deleted environment %s.\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVarP(&version, "version", "v", "", "version to delete")
	return cmd
}

func (p *printer) environmentTable(w io.Writer, es []api.Environment) {
	rows := make([][]string, 0, len(es))
	for _, e := range es {
		python := ""
		if e.Tide != nil {
			python = e.Tide.Python
		}
		rows = append(rows, []string{e.Name, e.Version, dash(e.Image), dash(python), p.ago(e.CreatedOn), dash(e.Description)})
	}
	table(w, []string{"NAME", "VERSION", "IMAGE", "PYTHON", "AGE", "DESCRIPTION"}, rows)
}

func (p *printer) environmentDetails(w io.Writer, e *api.Environment) {
	lines := []kv{
		{"name", e.Name},
		{"version", e.Version},
		{"reference", e.Ref()},
		{"workspace", e.Workspace},
		{"description", e.Description},
		{"image", e.Image},
		{"build", buildLine(e.Build)},
		{"tags", joinMap(e.Tags)},
		{"created_on", p.when(e.CreatedOn)},
	}
	if h := e.Tide; h != nil {
		lines = append(lines, kv{"tide.python", h.Python}, kv{"tide.path", strings.Join(h.Path, ":")}, kv{"tide.variables", joinMap(h.Variables)})
	}
	details(w, lines)
	if e.CondaFile != "" {
		fmt.Fprintf(w, "conda_file:\n%s", indent(e.CondaFile))
	}
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("  " + strings.TrimRight(l, "\n") + "\n")
	}
	return b.String()
}

// jobEnvironment is what a job runs with: the registered environment its
// reference resolved to, or its inline image.
func jobEnvironment(j *api.Job) string {
	switch {
	case j.ResolvedEnvironment != nil:
		return j.ResolvedEnvironment.Ref()
	case j.Environment == nil:
		return ""
	case j.Environment.Ref != "":
		return j.Environment.Ref
	}
	return j.Environment.Image
}

func jobDistribution(d *api.Distribution) string {
	if d == nil {
		return ""
	}
	switch d.Type {
	case "tensorflow":
		return fmt.Sprintf("tensorflow, %d worker(s), %d parameter server(s)", d.WorkerCount, d.ParameterServerCount)
	}
	return fmt.Sprintf("%s, %d process(es) per node", d.Type, max(d.ProcessCountPerInstance, 1))
}

// buildLine names a build context: its snapshot (the uploaded folder).
func buildLine(b *api.BuildContext) string {
	if b == nil {
		return ""
	}
	return b.Path + " (a Docker build context; the docker runtime builds it)"
}
