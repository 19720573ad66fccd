package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
)

// SSHExitError is the exit status of the ssh program connect-ssh ran; tide
// exits with the same code and prints nothing more (ssh spoke already).
type SSHExitError struct{ Code int }

func (e *SSHExitError) Error() string { return fmt.Sprintf("ssh exited with status %d", e.Code) }

func (r *run) computeConnectSSH() *cobra.Command {
	var node, key string
	cmd := &cobra.Command{
		Use:   "connect-ssh NAME [-- COMMAND...]",
		Short: "Open an SSH session on a node of a compute (OpenSSH through the tide server)",
		Long: `Run OpenSSH's ssh to a node of a compute instance or cluster. The connection goes
through the tide server and the node's agent (no port is opened on the node), so
it reaches local, ssh, Slurm, Docker and Kubernetes nodes alike. The node accepts
the key in the compute's ssh_settings.ssh_key_value (and a cluster's
admin_password); ssh_public_access_enabled: false refuses every connection.
The session runs as the user the node's agent runs as, in the node's home
folder. A COMMAND after -- runs instead of a shell; scp and sftp work with the
same ProxyCommand (tide compute list-nodes prints it).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() == 0 || len(args) == 0 {
				return usagef("connect-ssh: want NAME (the compute), then optionally -- COMMAND")
			}
			if at := cmd.ArgsLenAtDash(); at > 1 || (at < 0 && len(args) > 1) {
				return usagef("connect-ssh: want one NAME before --, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.connectSSH(cmd.Context(), args[0], node, key, args[1:])
		},
	}
	cmd.Flags().StringVar(&node, "node-id", "", "the node (default: an instance's node, or a cluster's only node; see tide compute list-nodes)")
	cmd.Flags().StringVarP(&key, "private-key-file-path", "i", "", "private key file for ssh (default: ssh's own choice, ~/.ssh/id_*)")
	return cmd
}

func (r *run) connectSSH(ctx context.Context, name, node, key string, command []string) error {
	cl, err := r.client()
	if err != nil {
		return err
	}
	server, token, err := r.endpoint()
	if err != nil {
		return err
	}
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		return errors.New("connect-ssh runs OpenSSH's ssh, which is not on PATH: install it (Debian: apt-get install openssh-client)")
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	c, err := cl.Compute(rctx, r.workspace, name)
	if err != nil {
		return err
	}
	nodes, err := cl.Nodes(rctx, r.workspace, name)
	if err != nil {
		return err
	}
	n, err := pickSSHNode(c, nodes, node)
	if err != nil {
		return err
	}
	if why, ok := strings.CutPrefix(n.Connection, "no SSH: "); ok {
		return fmt.Errorf("%s", why)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("connect-ssh: finding the tide binary for ssh's ProxyCommand: %w", err)
	}
	if n.SSHHostKey == "" {
		return fmt.Errorf("node %s has not reported its SSH host key yet (its agent may be starting); retry in a few seconds", n.ID)
	}
	// The node's host key, as its agent told the server, is the only one
	// ssh accepts: a changed key fails instead of asking.
	known, err := os.CreateTemp("", "tide-known-hosts-")
	if err != nil {
		return fmt.Errorf("connect-ssh: %w", err)
	}
	defer os.Remove(known.Name())
	_, err = fmt.Fprintf(known, "%s %s\n", n.ID, n.SSHHostKey)
	if cerr := known.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("connect-ssh: writing the node's host key: %w", err)
	}
	proxy := fmt.Sprintf("%s compute ssh-proxy %s --node-id %s -w %s", shellQuote(exe), shellQuote(name), shellQuote(n.ID), shellQuote(r.workspace))
	args := []string{
		"-o", "ProxyCommand=" + strings.ReplaceAll(proxy, "%", "%%"),
		"-o", "HostKeyAlias=" + n.ID,
		"-o", "UserKnownHostsFile=" + known.Name(),
		"-o", "StrictHostKeyChecking=yes",
	}
	if key != "" {
		args = append(args, "-i", key)
	}
	args = append(args, c.SSHUser()+"@"+n.ID)
	if len(command) > 0 {
		args = append(args, "--")
		args = append(args, command...)
	}
	run := exec.CommandContext(ctx, sshBin, args...)
	// ssh runs the ProxyCommand, which reaches the same server as this
	// command, with the same credentials.
	run.Env = append(os.Environ(), "TIDE_SERVER="+server, "TIDE_TOKEN="+token, "TIDE_WORKSPACE="+r.workspace)
	if r.configPath != "" {
		run.Env = append(run.Env, "TIDE_CONFIG="+r.configPath)
	}
	run.Stdin, run.Stdout, run.Stderr = r.app.Stdin, r.app.Stdout, r.app.Stderr
	err = run.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &SSHExitError{Code: ee.ExitCode()}
	}
	return err
}

// pickSSHNode is the node connect-ssh reaches: the one named, an
// instance's node, or a cluster's only node.
func pickSSHNode(c *api.Compute, nodes []api.Node, id string) (*api.Node, error) {
	if id == "" && c.Instance != nil {
		if c.Instance.State != api.InstanceRunning && c.Instance.State != api.InstanceJobRunning {
			return nil, fmt.Errorf("instance is %s; start it with tide compute start %s", c.Instance.State, c.Name)
		}
		id = c.Instance.Node
	}
	if id == "" {
		switch len(nodes) {
		case 1:
			return &nodes[0], nil
		case 0:
			return nil, fmt.Errorf("compute %s has no nodes now (it scales with its jobs); submit a job or raise min_instances", c.Name)
		default:
			return nil, usagef("compute %s has %d nodes; pick one with --node-id (tide compute list-nodes %s)", c.Name, len(nodes), c.Name)
		}
	}
	for i := range nodes {
		if nodes[i].ID == id {
			return &nodes[i], nil
		}
	}
	return nil, fmt.Errorf("node %s: not a node of compute %s; run 'tide compute list-nodes %s'", id, c.Name, c.Name)
}

func (r *run) computeSSHProxy() *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "ssh-proxy NAME",
		Short: "Relay stdin/stdout to a node's SSH server through the tide server (an OpenSSH ProxyCommand)",
		Long: `Carry one SSH connection to a node of a compute between standard input and output
and the tide server, for OpenSSH's ProxyCommand:

  ssh -o ProxyCommand='tide compute ssh-proxy NAME --node-id NODE -w WORKSPACE' azureuser@NODE

tide compute list-nodes NAME prints this line for each node; scp -o and sftp -o
take the same option.`,
		Args: r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			t, err := cl.SSHTunnel(cmd.Context(), r.workspace, args[0], node)
			if err != nil {
				return err
			}
			defer t.Close()
			// ssh closes our stdin when it ends (or dies): the session
			// ends with it.
			go func() { _, _ = io.Copy(t, r.app.Stdin); t.Close() }()
			_, _ = io.Copy(r.app.Stdout, t)
			return nil
		},
	}
	cmd.Flags().StringVar(&node, "node-id", "", "the node (default: an instance's node, or a cluster's only node)")
	return cmd
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=:@", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
