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
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/service"
)

func (r *run) when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}

func (r *run) userCommand() *cobra.Command {
	var admin bool
	var desc string
	create := &cobra.Command{
		Use:   "create NAME [--admin]",
		Short: "Create a user and print its first token (shown once)",
		Long: `Create a user. Requests are attributed to users; what a user may do in a
workspace is its role there ('tide role assign'). --admin makes a server
admin: users, workspaces, locations and quotas, and every workspace.`,
		Example: "  tide user create ana\n  tide role assign --user ana --role 'AzureML Data Scientist' --workspace default",
		Args:    r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				out, err := cl.CreateUser(ctx, api.User{Name: args[0], Admin: admin, Description: desc})
				if err != nil {
					return err
				}
				return r.printer().print(out, func(w io.Writer) {
					fmt.Fprintf(w, "Created user %s.\n", out.User.Name)
					if out.Token != nil {
						fmt.Fprintf(w, "Token (shown once; give it to %s, who signs in with TIDE_TOKEN or the CLI config):\n%s\n", out.User.Name, out.Token.Secret)
					}
				})
			})
		},
	}
	create.Flags().BoolVar(&admin, "admin", false, "make the user a server admin")
	create.Flags().StringVar(&desc, "description", "", "a description")
	return group("user", "Manage users (server admins)", create, r.principalList("user", api.PrincipalUser), r.principalDelete("user"))
}

func (r *run) identityCommand() *cobra.Command {
	var desc string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an identity jobs can act as",
		Long: `Create an identity (Azure's user-assigned managed identity). Give it roles
with 'tide role assign --identity NAME', and name it in a compute:

  identity:
    type: user_assigned
    user_assigned_identities: [{resource_id: NAME}]

Each job attempt on that compute gets a short-lived token acting as NAME
(TIDE_IDENTITY_TOKEN; IDENTITY_ENDPOINT gives a fresh one), which dies when
the attempt ends. A compute with identity: {type: system_assigned} acts as
compute:WORKSPACE/COMPUTE instead, which needs no creating.`,
		Args: r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				out, err := cl.CreateUser(ctx, api.User{Name: args[0], Kind: api.PrincipalIdentity, Description: desc})
				if err != nil {
					return err
				}
				return r.printer().print(out.User, func(w io.Writer) { fmt.Fprintf(w, "Created identity %s.\n", out.User.Name) })
			})
		},
	}
	create.Flags().StringVar(&desc, "description", "", "a description")
	return group("identity", "Manage identities jobs act as", create, r.principalList("identity", api.PrincipalIdentity), r.principalDelete("identity"))
}

func (r *run) principalList(noun, kind string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List " + noun + "s",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				us, err := cl.Users(ctx, kind)
				if err != nil {
					return err
				}
				return r.printer().print(us, func(w io.Writer) {
					rows := make([][]string, 0, len(us))
					for _, u := range us {
						admin := ""
						if u.Admin {
							admin = "yes"
						}
						rows = append(rows, []string{u.Name, admin, r.when(u.CreatedOn), u.CreatedBy, u.Description})
					}
					table(w, []string{"NAME", "ADMIN", "CREATED", "BY", "DESCRIPTION"}, rows)
				})
			})
		},
	}
}

func (r *run) principalDelete(noun string) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a " + noun + " with its tokens and roles",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				if err := cl.DeleteUser(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(r.app.Stdout, "Deleted %s %s.\n", noun, args[0])
				return nil
			})
		},
	}
}

func (r *run) tokenCommand() *cobra.Command {
	var name, expires, user, dataDir string
	create := &cobra.Command{
		Use:   "create [--name N] [--expires 30d] [--user U] [--data-dir DIR]",
		Short: "Create an API token (shown once)",
		Long: `Create a token for yourself (admins: for --user). Only its hash is kept;
the secret is printed once. --expires sets its life (30d, 12h); without it
the token lasts until revoked.

--data-dir mints a token for the bootstrap owner straight from a server's
data folder, on the server's machine, with no server running or reachable:
the way back in when the owner token is lost.`,
		Example: "  tide token create --name ci --expires 30d\n  tide token create --data-dir ~/.local/share/tide",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if changed(cmd, "data-dir") {
				return r.ownerToken(cmd, dataDir, name, expires)
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				t, err := cl.CreateToken(ctx, api.TokenRequest{Name: name, Expires: expires, User: user})
				if err != nil {
					return err
				}
				return r.printer().print(t, func(w io.Writer) { r.printNewToken(w, t) })
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name to tell the token by")
	create.Flags().StringVar(&expires, "expires", "", "lifetime: 30d, 12h, 90m (default: until revoked)")
	create.Flags().StringVar(&user, "user", "", "the user the token signs in (admins only; default: you)")
	create.Flags().StringVar(&dataDir, "data-dir", "", "mint an owner token from this server data folder directly")
	var all bool
	list := &cobra.Command{
		Use:   "list [--all]",
		Short: "List your tokens (admins: --all for everyone's)",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				ts, err := cl.Tokens(ctx, all)
				if err != nil {
					return err
				}
				return r.printer().print(ts, func(w io.Writer) {
					rows := make([][]string, 0, len(ts))
					for _, t := range ts {
						rows = append(rows, []string{t.ID, t.Name, t.User, r.when(t.CreatedOn), r.when(t.ExpiresOn), r.when(t.LastUsed)})
					}
					table(w, []string{"ID", "NAME", "USER", "CREATED", "EXPIRES", "LAST USED"}, rows)
				})
			})
		},
	}
	list.Flags().BoolVar(&all, "all", false, "everyone's tokens (server admins)")
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token (it stops working at once on this server, within 5 s on other replicas)",
		Args:  r.exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				if err := cl.RevokeToken(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(r.app.Stdout, "Revoked token %s.\n", args[0])
				return nil
			})
		},
	}
	return group("token", "Manage API tokens", create, list, revoke)
}

func (r *run) printNewToken(w io.Writer, t *api.Token) {
	exp := "never expires"
	if !t.ExpiresOn.IsZero() {
		exp = "expires " + r.when(t.ExpiresOn)
	}
	fmt.Fprintf(w, "Token %s for %s (%s). The secret is shown once:\n%s\n", t.ID, t.User, exp, t.Secret)
}

func (r *run) ownerToken(cmd *cobra.Command, dataDir, name, expires string) error {
	if r.app.Roles.OwnerToken == nil {
		return usagef("this build cannot open a server's data folder")
	}
	d, err := service.ParseExpiry(expires)
	if err != nil {
		return usagef("--expires: %v", err)
	}
	cfg, err := config.Load("")
	if err != nil {
		return err
	}
	if err := applyServerFlags(&cfg, cmd, dataDir, "", ""); err != nil {
		return err
	}
	if name == "" {
		name = "recovered"
	}
	t, err := r.app.Roles.OwnerToken(cmd.Context(), cfg, name, d)
	if err != nil {
		return fmt.Errorf("minting an owner token from %s: %w", cfg.DataDir, err)
	}
	return r.printer().print(t, func(w io.Writer) { r.printNewToken(w, &t) })
}

func (r *run) roleCommand() *cobra.Command {
	var user, identity, role string
	assign := &cobra.Command{
		Use:   "assign (--user U | --identity I) --role ROLE [--workspace W]",
		Short: "Give a user or identity a role in a workspace",
		Long: `Give a user or an identity a role in a workspace (replacing the one it had
there). The built-in roles, as in Azure ML:

  Reader                    read everything but secrets
  AzureML Data Scientist    submit and cancel own jobs, data, start/stop instances; no compute create/delete
  AzureML Compute Operator  create, update, delete, start and stop computes; no jobs
  Contributor               everything but role assignment
  Owner                     everything`,
		Example: "  tide role assign --user ana --role 'AzureML Data Scientist' --workspace default\n  tide role assign --identity compute:default/gpu --role Contributor",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			who, err := oneOf(user, identity)
			if err != nil {
				return err
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				ra, err := cl.AssignRole(ctx, r.workspace, who, role)
				if err != nil {
					return err
				}
				return r.printer().print(ra, func(w io.Writer) {
					fmt.Fprintf(w, "%s is %s in workspace %s.\n", ra.Principal, ra.Role, ra.Workspace)
				})
			})
		},
	}
	assign.Flags().StringVar(&user, "user", "", "the user")
	assign.Flags().StringVar(&identity, "identity", "", "the identity (or compute:WORKSPACE/NAME, a compute's own)")
	assign.Flags().StringVar(&role, "role", "", "Reader, 'AzureML Data Scientist', 'AzureML Compute Operator', Contributor or Owner")
	var all bool
	list := &cobra.Command{
		Use:   "list [--workspace W | --all]",
		Short: "List role assignments of a workspace (--all: every workspace you have a role in)",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws := r.workspace
			if all {
				ws = ""
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				ras, err := cl.RoleAssignments(ctx, ws)
				if err != nil {
					return err
				}
				return r.printer().print(ras, func(w io.Writer) {
					rows := make([][]string, 0, len(ras))
					for _, ra := range ras {
						rows = append(rows, []string{ra.Workspace, ra.Principal, ra.Role, r.when(ra.CreatedOn), ra.CreatedBy})
					}
					table(w, []string{"WORKSPACE", "PRINCIPAL", "ROLE", "SINCE", "BY"}, rows)
				})
			})
		},
	}
	list.Flags().BoolVar(&all, "all", false, "every workspace you have a role in")
	var ruser, ridentity string
	remove := &cobra.Command{
		Use:   "remove (--user U | --identity I) [--workspace W]",
		Short: "Take a user's or identity's role in a workspace away",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			who, err := oneOf(ruser, ridentity)
			if err != nil {
				return err
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				if err := cl.RemoveRole(ctx, r.workspace, who); err != nil {
					return err
				}
				fmt.Fprintf(r.app.Stdout, "%s has no role in workspace %s now.\n", who, r.workspace)
				return nil
			})
		},
	}
	remove.Flags().StringVar(&ruser, "user", "", "the user")
	remove.Flags().StringVar(&ridentity, "identity", "", "the identity")
	return group("role", "Manage who may do what in a workspace", assign, list, remove)
}

func oneOf(user, identity string) (string, error) {
	if (user == "") == (identity == "") {
		return "", usagef("name exactly one of --user and --identity")
	}
	return user + identity, nil
}

func (r *run) secretCommand() *cobra.Command {
	var value string
	var fromStdin bool
	set := &cobra.Command{
		Use:   "set NAME (--value V | --stdin)",
		Short: "Set a workspace secret (jobs use it as ${{secrets.NAME}} in environment_variables)",
		Long: `Set a workspace secret. A job names it in its environment_variables:

  environment_variables:
    HF_TOKEN: ${{secrets.hf-token}}

The value goes into that job's environment only; it is never returned by
the API, never shown by 'job show' or the audit log, and the agent masks it
as *** in the job's log. --stdin reads the value from standard input (so it
stays out of your shell history and the process list).`,
		Example: "  printf %s \"$TOKEN\" | tide secret set hf-token --stdin",
		Args:    r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fromStdin {
				b, err := io.ReadAll(bufio.NewReader(r.app.Stdin))
				if err != nil {
					return err
				}
				value = strings.TrimRight(string(b), "\r\n")
			}
			if value == "" {
				return usagef("give the value with --value or --stdin")
			}
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				s, err := cl.SetSecret(ctx, r.workspace, args[0], value)
				if err != nil {
					return err
				}
				return r.printer().print(s, func(w io.Writer) { fmt.Fprintf(w, "Set secret %s in workspace %s.\n", s.Name, r.workspace) })
			})
		},
	}
	set.Flags().StringVar(&value, "value", "", "the value")
	set.Flags().BoolVar(&fromStdin, "stdin", false, "read the value from standard input")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the workspace's secrets (names only)",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				ss, err := cl.Secrets(ctx, r.workspace)
				if err != nil {
					return err
				}
				return r.printer().print(ss, func(w io.Writer) {
					rows := make([][]string, 0, len(ss))
					for _, s := range ss {
						rows = append(rows, []string{s.Name, r.when(s.UpdatedOn), s.UpdatedBy})
					}
					table(w, []string{"NAME", "UPDATED", "BY"}, rows)
				})
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a workspace secret",
		Args:  r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				if err := cl.DeleteSecret(ctx, r.workspace, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(r.app.Stdout, "Deleted secret %s.\n", args[0])
				return nil
			})
		},
	}
	rotate := &cobra.Command{
		Use:   "rotate-key",
		Short: "Replace the server's secret key, sealing every secret again with the new one (server admins)",
		Long: `Replace the key the server encrypts secrets with (DATA_DIR/secrets.key):
every workspace secret and datastore credential of every workspace is
sealed again with a new key in one store transaction, then the new key
file replaces the old one. Jobs and datastores keep working; the old key
opens nothing any more. A rotation that fails part way leaves the server
sealing with the new key and still opening with the old; run it again
(or restart the server) to finish.`,
		Example: "  tide secret rotate-key",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				out, err := cl.RotateSecretKey(ctx)
				if err != nil {
					return err
				}
				return r.printer().print(out, func(w io.Writer) {
					fmt.Fprintf(w, "Rotated the secret key: sealed %d secrets and %d datastore credentials with the new key.\n", out.Secrets, out.DatastoreCredentials)
				})
			})
		},
	}
	return group("secret", "Manage workspace secrets", set, list, del, rotate)
}

func (r *run) auditCommand() *cobra.Command {
	var user, since string
	var limit int
	list := &cobra.Command{
		Use:     "list [--user U] [--since 24h] [--limit N]",
		Short:   "List mutating calls: who, what, when, from where, result (server admins)",
		Example: "  tide audit list --user ana --since 7d",
		Args:    r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				es, err := cl.Audit(ctx, user, since, limit)
				if err != nil {
					return err
				}
				return r.printer().print(es, func(w io.Writer) {
					rows := make([][]string, 0, len(es))
					for _, e := range es {
						rows = append(rows, []string{e.Time.Local().Format("2006-01-02 15:04:05"), e.User, e.Method + " " + e.Path, itoa(e.Status), e.Remote})
					}
					table(w, []string{"TIME", "USER", "CALL", "STATUS", "FROM"}, rows)
				})
			})
		},
	}
	list.Flags().StringVar(&user, "user", "", "only this user's calls")
	list.Flags().StringVar(&since, "since", "", "only calls since: RFC 3339, or 7d, 24h")
	list.Flags().IntVar(&limit, "limit", 100, "at most N entries (0: all)")
	return group("audit", "Read the audit log", list)
}

func (r *run) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who your token signs in, and your roles",
		Args:  r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.request(cmd.Context(), func(ctx context.Context, cl *api.Client) error {
				me, err := cl.WhoAmI(ctx)
				if err != nil {
					return err
				}
				return r.printer().print(me, func(w io.Writer) {
					lines := []kv{{"user", me.User}, {"kind", me.Kind}, {"job", me.Job}}
					if me.Admin {
						lines = append(lines, kv{"admin", "yes (server admin: every workspace)"})
					}
					for ws, role := range me.Roles {
						lines = append(lines, kv{"role in " + ws, role})
					}
					details(w, lines)
				})
			})
		},
	}
}
