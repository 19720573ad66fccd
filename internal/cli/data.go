package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

func (r *run) dataCommand() *cobra.Command {
	return group("data", "Manage data assets: named, versioned, immutable data jobs use as azureml:NAME:VERSION (like az ml data)",
		r.dataCreate(), r.dataShow(), r.dataList(), r.dataArchive(true), r.dataArchive(false),
	)
}

func (r *run) dataCreate() *cobra.Command {
	var (
		file, name, version string
		sets                []string
	)
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name NAME] [--version V] [--set key=value ...]",
		Short: "Create a data asset version from a data YAML file",
		Long: `Create a version of a data asset from a YAML file in Azure ML's shape:

  name: iris
  version: 1              # leave out for the next number
  type: uri_folder        # uri_file | uri_folder | mltable
  path: ./data            # or azureml://datastores/NAME/paths/P, wasbs://..., https://...

A local path (relative to the file) is uploaded. Versions are immutable.
Jobs then use path: azureml:iris:1 or azureml:iris@latest.`,
		Example: "  tide data create -f data.yml",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := r.readSpecFile(file)
			if err != nil {
				return err
			}
			if version != "" {
				sets = append(sets, "version="+version)
			}
			a, err := spec.ParseDataAsset(file, b, nameSet(name, sets))
			if err != nil {
				return err
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				if kind, _ := spec.ClassifyDataPath(a.Path); kind == spec.PathLocal {
					ref, err := r.upload(ctx, cl, fileBase(file), "path", a.Path, a.Type != api.DataURIFile)
					if err != nil {
						return err
					}
					a.Path = ref
				}
				out, err := cl.CreateDataAsset(ctx, r.workspace, a)
				if err != nil {
					return err
				}
				return r.printer().print(out, func(w io.Writer) { dataDetails(w, out) })
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "data YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "data asset name (overrides the file's)")
	cmd.Flags().StringVarP(&version, "version", "v", "", "version (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set description=... (repeatable)")
	return cmd
}

func (r *run) dataShow() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "show NAME [--version V]",
		Short: "Show a data asset version (default: the latest)",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				a, err := cl.DataAsset(ctx, r.workspace, args[0], version)
				if err != nil {
					return err
				}
				return r.printer().print(a, func(w io.Writer) { dataDetails(w, a) })
			})
		},
	}
	cmd.Flags().StringVarP(&version, "version", "v", spec.LatestVersion, "version, or latest")
	return cmd
}

func (r *run) dataList() *cobra.Command {
	var (
		name     string
		archived bool
	)
	cmd := &cobra.Command{
		Use:   "list [--name NAME] [--archived]",
		Short: "List data assets (every version)",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				as, err := cl.DataAssets(ctx, r.workspace, name, archived)
				if err != nil {
					return err
				}
				return r.printer().print(as, func(w io.Writer) {
					rows := make([][]string, 0, len(as))
					for _, a := range as {
						state := ""
						if a.Archived {
							state = "archived"
						}
						rows = append(rows, []string{a.Name, a.Version, a.Type, a.Path, dash(state)})
					}
					table(w, []string{"NAME", "VERSION", "TYPE", "PATH", "STATE"}, rows)
				})
			})
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "only the versions of this data asset")
	cmd.Flags().BoolVar(&archived, "archived", false, "include archived versions")
	return cmd
}

func (r *run) dataArchive(archive bool) *cobra.Command {
	verb, short := "archive", "Archive a data asset version (left out of lists and @latest; jobs may still name it)"
	if !archive {
		verb, short = "restore", "Restore an archived data asset version"
	}
	var version string
	cmd := &cobra.Command{
		Use:   verb + " NAME --version V",
		Short: short,
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version == "" {
				return fmt.Errorf("--version: required; run 'tide data list --name %s --archived' to see the versions", args[0])
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				a, err := cl.ArchiveDataAsset(ctx, r.workspace, args[0], version, archive)
				if err != nil {
					return err
				}
				fmt.Fprintf(r.app.Stdout, "Data asset %s:%s %sd.\n", a.Name, a.Version, verb)
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&version, "version", "v", "", "version to "+verb)
	return cmd
}

func dataDetails(w io.Writer, a *api.DataAsset) {
	fmt.Fprintf(w, "Name:        %s\nVersion:     %s\nType:        %s\nPath:        %s\n", a.Name, a.Version, a.Type, a.Path)
	if a.Description != "" {
		fmt.Fprintf(w, "Description: %s\n", a.Description)
	}
	if a.Archived {
		fmt.Fprintf(w, "State:       archived\n")
	}
	fmt.Fprintf(w, "Reference:   azureml:%s:%s\n", a.Name, a.Version)
}
