package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob"
	"github.com/tideml/tide/internal/spec"
)

func (r *run) datastoreCommand() *cobra.Command {
	return group("datastore", "Manage datastores: folders jobs read as azureml://datastores/NAME/paths/... (like az ml datastore)",
		r.datastoreCreate(), r.datastoreShow(), r.datastoreList(), r.datastoreDelete(),
	)
}

func (r *run) datastoreCreate() *cobra.Command {
	var (
		file, name string
		sets       []string
	)
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name NAME] [--set key=value ...]",
		Short: "Create or replace a datastore from a datastore YAML file",
		Long: `Create a datastore from a YAML file in Azure ML's shape (name, type,
description, tags). tide runs type: local, a folder with the same absolute
path on every node, given by the tide field path:

  name: shared_data
  type: local
  path: /srv/data

Jobs then read azureml://datastores/shared_data/paths/iris/ as /srv/data/iris/.

type: azure_blob is an Azure blob container, read and written by the nodes.
The secret is stored encrypted like workspace secrets (or names one, set
with 'tide secret set'), never shown, and given only to a node whose job
reads or writes the datastore:

  name: blob_data
  type: azure_blob
  account_name: mystorage
  container_name: data
  credentials:
    account_key: ${{secrets.storage-key}}   # a workspace secret, or the key itself;
                                            # or sas_token: ...
  # endpoint_url: http://127.0.0.1:10000/devstoreaccount1   (Azurite)

Jobs then read azureml://datastores/blob_data/paths/iris/, or
wasbs://data@mystorage.blob.core.windows.net/iris/. azure_file and
azure_data_lake_gen1/gen2 are not supported.`,
		Example: "  tide datastore create -f datastore.yml",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := r.readSpecFile(file)
			if err != nil {
				return err
			}
			d, err := spec.ParseDatastore(file, data, nameSet(name, sets))
			if err != nil {
				return err
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				out, _, err := cl.PutDatastore(ctx, r.workspace, d)
				if err != nil {
					return err
				}
				return r.printer().print(out, func(w io.Writer) { datastoreDetails(w, out) })
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "datastore YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "datastore name (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set path=/srv/data (repeatable)")
	return cmd
}

func (r *run) datastoreShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a datastore",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				d, err := cl.Datastore(ctx, r.workspace, args[0])
				if err != nil {
					return err
				}
				return r.printer().print(d, func(w io.Writer) { datastoreDetails(w, d) })
			})
		},
	}
}

func (r *run) datastoreList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the datastores of the workspace",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				ds, err := cl.Datastores(ctx, r.workspace)
				if err != nil {
					return err
				}
				return r.printer().print(ds, func(w io.Writer) { datastoreTable(w, ds) })
			})
		},
	}
}

func (r *run) datastoreDelete() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a datastore (its folder is left alone)",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				if err := cl.DeleteDatastore(ctx, r.workspace, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(r.app.Stdout, "Datastore %s deleted.\n", args[0])
				return nil
			})
		},
	}
}

func datastoreDetails(w io.Writer, d *api.Datastore) {
	fmt.Fprintf(w, "Name:        %s\nType:        %s\n", d.Name, d.Type)
	if d.Type == api.DatastoreAzureBlob {
		fmt.Fprintf(w, "Account:     %s\nContainer:   %s\nURL:         %s/%s\nCredentials: %s\n",
			d.AccountName, d.ContainerName, azureblob.ServiceURL(d), d.ContainerName, credentialsSummary(d.Credentials))
	} else {
		fmt.Fprintf(w, "Path:        %s\n", dash(d.Path))
	}
	if d.Description != "" {
		fmt.Fprintf(w, "Description: %s\n", d.Description)
	}
	fmt.Fprintf(w, "Reference:   azureml://datastores/%s/paths/PATH\n", d.Name)
}

func datastoreTable(w io.Writer, ds []api.Datastore) {
	rows := make([][]string, 0, len(ds))
	for _, d := range ds {
		where := d.Path
		if d.Type == api.DatastoreAzureBlob {
			where = azureblob.ServiceURL(&d) + "/" + d.ContainerName
		}
		rows = append(rows, []string{d.Name, d.Type, dash(where), dash(d.Description)})
	}
	table(w, []string{"NAME", "TYPE", "PATH", "DESCRIPTION"}, rows)
}

// credentialsSummary says which secret a datastore has, never the secret:
// the workspace secret it names, or that one is stored.
func credentialsSummary(c *api.DatastoreCredentials) string {
	switch v := c.Kind(); {
	case v == api.CredentialNone:
		return "none (a public container)"
	case c.AccountKey != "" || c.SASToken != "":
		return v + " from " + strings.TrimSpace(c.AccountKey+c.SASToken)
	default:
		return v + " (set, stored encrypted; never shown)"
	}
}
