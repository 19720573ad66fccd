package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
)

// configCommand manages the client configuration's contexts: one per
// server, kubectl style.
func (r *run) configCommand() *cobra.Command {
	get := &cobra.Command{
		Use:   "get-contexts",
		Short: "List the servers (contexts) in the client config; * marks the current one",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, _, err := r.loadConfigFile()
			if err != nil {
				return err
			}
			return r.printer().print(f, func(w io.Writer) {
				rows := [][]string{}
				for _, n := range f.Names() {
					c := f.Contexts[n]
					cur := ""
					if n == f.CurrentContext {
						cur = "*"
					}
					tls := "no"
					if c.CAFingerprint != "" {
						tls = "pinned CA " + c.CAFingerprint[:min(16, len(c.CAFingerprint))]
					}
					rows = append(rows, []string{cur, n, c.Server, c.Workspace, tls})
				}
				table(w, []string{"CURRENT", "NAME", "SERVER", "WORKSPACE", "TLS"}, rows)
			})
		},
	}
	use := &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make NAME the server the CLI talks to",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, path, err := r.loadConfigFile()
			if err != nil {
				return err
			}
			if _, err := f.Context(args[0]); err != nil {
				return &UsageError{Err: err}
			}
			f.CurrentContext = args[0]
			if err := api.SaveClientConfigFile(path, f); err != nil {
				return err
			}
			fmt.Fprintf(r.app.Stdout, "Switched to context %s (%s).\n", args[0], f.Contexts[args[0]].Server)
			return nil
		},
	}
	current := &cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, path, err := r.loadConfigFile()
			if err != nil {
				return err
			}
			if f.CurrentContext == "" {
				return fmt.Errorf("%s has no current context; start a server ('tide server') or run 'tide config use-context NAME'", path)
			}
			fmt.Fprintln(r.app.Stdout, f.CurrentContext)
			return nil
		},
	}
	return group("config", "Manage the CLI's servers (contexts)", get, use, current)
}

func (r *run) loadConfigFile() (api.ClientConfigFile, string, error) {
	path, err := r.clientConfigPath()
	if err != nil {
		return api.ClientConfigFile{}, "", err
	}
	f, err := api.LoadClientConfigFile(path)
	return f, path, err
}
