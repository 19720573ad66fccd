package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

func (r *run) componentCommand() *cobra.Command {
	return group("component", "Register command components that pipeline steps run (like az ml component)",
		r.componentCreate(), r.componentList(), r.componentShow(), r.componentDelete(),
	)
}

func (r *run) componentCreate() *cobra.Command {
	var (
		file, name, version string
		sets                []string
	)
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name NAME] [--version V] [--set key=value ...]",
		Short: "Register a component version from an Azure ML command component YAML file",
		Long: `Register a version of a command component from the YAML file 'az ml component
create -f' reads (name, version, inputs, outputs, code, environment,
command). The code folder is read relative to the file and uploaded. Without
a version the server takes the next number. Versions are immutable.

Pipeline steps name it as component: azureml:NAME:VERSION or azureml:NAME@latest.`,
		Example: "  tide component create -f train.yml",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := r.readSpecFile(file)
			if err != nil {
				return err
			}
			if version != "" {
				sets = append(append([]string(nil), sets...), "version="+version)
			}
			c, err := spec.ParseComponent(file, data, nameSet(name, sets))
			if err != nil {
				return err
			}
			if c.Name == "" {
				return usagef("name: required to register a component (or pass --name)")
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			if err := r.prepareComponent(cmd.Context(), cl, file, "", c); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			out, _, err := cl.CreateComponent(ctx, r.workspace, c)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(out, func(w io.Writer) { p.componentDetails(w, out) })
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "component YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "component name (overrides the file's)")
	cmd.Flags().StringVarP(&version, "version", "v", "", "version (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set version=2 (repeatable)")
	return cmd
}

// prepareComponent resolves what a component names relative to its file:
// an environment file:, a build path and the code folder (uploaded).
// field prefixes error messages ("jobs.train.component.").
func (r *run) prepareComponent(ctx context.Context, cl *api.Client, file, field string, c *api.Component) error {
	var err error
	if c.Environment, err = localEnvironment(file, c.Environment); err != nil {
		return err
	}
	c.Code, err = r.uploadCode(ctx, cl, fileBase(file), field+"code", c.Code)
	return err
}

// readComponentFile reads and prepares the component file a step names
// (relative to the pipeline file).
func (r *run) readComponentFile(ctx context.Context, cl *api.Client, pipelineFile, field, ref string) (*api.Component, error) {
	p, _ := spec.ComponentFile(ref)
	if !filepath.IsAbs(p) {
		p = filepath.Join(fileBase(pipelineFile), p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, usagef("%s: %s: %v (component files are relative to the pipeline file)", field, ref, err)
	}
	c, err := spec.ParseComponent(p, data, nil)
	if err != nil {
		return nil, err
	}
	if err := r.prepareComponent(ctx, cl, p, field+".", c); err != nil {
		return nil, err
	}
	return c, nil
}

// componentArg splits NAME, NAME:VERSION or NAME@latest (an azureml:
// prefix is allowed); --version wins over the argument's version.
func componentArg(arg, version string) (name, v string, err error) {
	if !strings.HasPrefix(arg, "azureml:") {
		arg = "azureml:" + arg
	}
	ref, err := spec.ParseComponentRef(arg)
	if err != nil {
		return "", "", usagef("%s: want NAME, NAME:VERSION or NAME@latest", strings.TrimPrefix(arg, "azureml:"))
	}
	if version != "" {
		return ref.Name, version, nil
	}
	return ref.Name, ref.Version, nil
}

func (r *run) componentList() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "list [--name NAME]",
		Short: "List the components of the workspace, every version",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			cs, err := cl.Components(ctx, r.workspace, name)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(cs, func(w io.Writer) {
				rows := make([][]string, 0, len(cs))
				for _, c := range cs {
					rows = append(rows, []string{c.Name, c.Version, dash(c.DisplayName), p.ago(c.CreatedOn), dash(c.Description)})
				}
				table(w, []string{"NAME", "VERSION", "DISPLAY NAME", "AGE", "DESCRIPTION"}, rows)
			})
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "list the versions of this component only")
	return cmd
}

func (r *run) componentShow() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:     "show NAME[:VERSION|@latest] [--version V]",
		Short:   "Show one version of a component (default: the latest)",
		Example: "  tide component show train:1\n  tide component show train@latest",
		Args:    r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, v, err := componentArg(args[0], version)
			if err != nil {
				return err
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			c, err := cl.Component(ctx, r.workspace, name, v)
			if err != nil {
				return err
			}
			p := r.printer()
			return p.print(c, func(w io.Writer) { p.componentDetails(w, c) })
		},
	}
	cmd.Flags().StringVarP(&version, "version", "v", "", "version (default: latest)")
	return cmd
}

func (r *run) componentDelete() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "delete NAME:VERSION [--version V]",
		Short: "Delete one version of a component; pipelines already submitted keep their copy",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, v, err := componentArg(args[0], version)
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
			if err := cl.DeleteComponent(ctx, r.workspace, name, v); err != nil {
				return err
			}
			fmt.Fprintf(r.app.Stdout, "Deleted component %s.\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVarP(&version, "version", "v", "", "version to delete")
	return cmd
}

func (p *printer) componentDetails(w io.Writer, c *api.Component) {
	env := ""
	if c.Environment != nil {
		env = c.Environment.Ref
		if env == "" {
			env = c.Environment.Image
		}
	}
	var ins, outs []string
	for _, name := range sortedKeys(c.Inputs) {
		in := c.Inputs[name]
		s := name + " (" + in.Type
		if in.Default != nil {
			s += ", default " + *in.Default
		}
		if in.Optional {
			s += ", optional"
		}
		ins = append(ins, s+")")
	}
	for _, name := range sortedKeys(c.Outputs) {
		outs = append(outs, name+" ("+c.Outputs[name].Type+")")
	}
	details(w, []kv{
		{"name", c.Name},
		{"version", c.Version},
		{"reference", "azureml:" + c.Name + ":" + c.Version},
		{"display_name", c.DisplayName},
		{"description", c.Description},
		{"inputs", strings.Join(ins, ", ")},
		{"outputs", strings.Join(outs, ", ")},
		{"code", c.Code},
		{"environment", env},
		{"command", c.Command},
		{"created_on", p.when(c.CreatedOn)},
	})
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
