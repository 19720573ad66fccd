package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// SSHTarget is a node a client may open an SSH session to, with what the
// node's SSH server must accept.
type SSHTarget struct {
	Node string
	Open api.SSHOpen
}

// sshDenied says why a compute takes no SSH connections ("" when it does):
// ssh_public_access_enabled false, or no key and no password.
func sshDenied(c *api.Compute) string {
	if c.SSHPublicAccessEnabled != nil && !*c.SSHPublicAccessEnabled {
		return fmt.Sprintf("SSH is disabled on compute %q (ssh_public_access_enabled: false)", c.Name)
	}
	if s := c.SSHSettings; s == nil || (s.SSHKeyValue == "" && s.AdminPassword == "") {
		return fmt.Sprintf("compute %q has no SSH key: create it with ssh_settings.ssh_key_value (tide compute create --ssh-key-value \"$(cat ~/.ssh/id_ed25519.pub)\")", c.Name)
	}
	return ""
}

// SSH checks that the caller may open an SSH session to a node of a
// compute (node "" picks an instance's node or a cluster's only node) and
// returns what the node's agent must be told.
func (s *Service) SSH(ctx context.Context, ws, name, node string) (*SSHTarget, error) {
	var out *SSHTarget
	err := s.Store.View(ctx, func(tx store.Tx) error {
		c, err := s.compute(ctx, tx, ws, name)
		if err != nil {
			return err
		}
		if why := sshDenied(c); why != "" {
			return errorf(403, "SSHDisabled", "%s", why)
		}
		if c.ProvisioningState == api.ProvisioningDeleting {
			return errorf(409, api.CodeConflict, "compute %q is being deleted", name)
		}
		if in := c.Instance; in != nil {
			if in.State != api.InstanceRunning && in.State != api.InstanceJobRunning {
				return errorf(409, api.CodeConflict, "instance is %s; start it with tide compute start %s", in.State, name)
			}
			if node != "" && node != in.Node {
				return notFound("node", node, fmt.Sprintf("instance %s has one node, %s", name, in.Node))
			}
			node = in.Node
		}
		nodes, err := tx.ListNodes(ctx, ws, name)
		if err != nil {
			return err
		}
		var n *api.Node
		switch {
		case node != "":
			for i := range nodes {
				if nodes[i].ID == node {
					n = &nodes[i]
				}
			}
			if n == nil {
				return notFound("node", node, "run 'tide compute list-nodes "+name+"' to see its nodes")
			}
		case len(nodes) == 1:
			n = &nodes[0]
		case len(nodes) == 0:
			return errorf(409, api.CodeConflict, "compute %q has no nodes now (it scales with its jobs); submit a job or raise min_instances, then run 'tide compute list-nodes %s'", name, name)
		default:
			return errorf(400, api.CodeBadRequest, "compute %q has %d nodes; pick one with --node-id (run 'tide compute list-nodes %s')", name, len(nodes), name)
		}
		switch n.State {
		case api.NodeIdle, api.NodeRunning:
		default:
			return errorf(409, api.CodeConflict, "node %s is %s; SSH needs a node whose agent runs (idle or running)", n.ID, n.State)
		}
		out = &SSHTarget{Node: n.ID, Open: sshOpen(c)}
		return nil
	})
	return out, err
}

// sshOpen is what a node's SSH server accepts for compute c.
func sshOpen(c *api.Compute) api.SSHOpen {
	var o api.SSHOpen
	s := c.SSHSettings
	for _, line := range strings.Split(s.SSHKeyValue, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			o.AuthorizedKeys = append(o.AuthorizedKeys, line)
		}
	}
	o.Password = s.AdminPassword
	if !c.IsInstance() {
		o.User = s.AdminUsername
	}
	return o
}

// SSHCommand is an OpenSSH command line that reaches a node through the
// tide server (tide compute ssh-proxy as its ProxyCommand).
func SSHCommand(ws string, c *api.Compute, node string) string {
	return fmt.Sprintf("ssh -o ProxyCommand='tide compute ssh-proxy %s --node-id %s -w %s' -o HostKeyAlias=%s %s@%s",
		c.Name, node, ws, node, c.SSHUser(), node)
}

// nodeConnection fills each node's connection string, or says why it
// has none.
func nodeConnection(ws string, c *api.Compute, nodes []api.Node) {
	why := sshDenied(c)
	for i := range nodes {
		if why != "" {
			nodes[i].Connection = "no SSH: " + why
			continue
		}
		nodes[i].Connection = SSHCommand(ws, c, nodes[i].ID)
	}
}
