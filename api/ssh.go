package api

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// SSHUpgrade is the protocol name of the upgraded connections that carry
// SSH between a client, the server and a node's agent.
const SSHUpgrade = "tide-ssh"

// InstanceSSHUser is the user name ssh logs in to an instance as (Azure's);
// the session runs as the node agent's user whatever the name.
const InstanceSSHUser = "azureuser"

// SSHUser is who ssh logs in to the compute's nodes as: a cluster's
// ssh_settings.admin_username, else InstanceSSHUser.
func (c *Compute) SSHUser() string {
	if !c.IsInstance() && c.SSHSettings != nil && c.SSHSettings.AdminUsername != "" {
		return c.SSHSettings.AdminUsername
	}
	return InstanceSSHUser
}

// SSHOpen asks a node's agent (event "ssh" on its stream) to dial the
// server back with ID and serve SSH on that connection to a client the
// server authorized. It carries the credentials the compute accepts, so a
// changed compute takes effect at the next connection.
type SSHOpen struct {
	ID string `json:"id"`
	// AuthorizedKeys are public keys in authorized_keys format
	// (ssh_settings.ssh_key_value), one per entry.
	AuthorizedKeys []string `json:"authorized_keys,omitempty"`
	// Password is a cluster's ssh_settings.admin_password, when set.
	Password string `json:"password,omitempty"`
	// User is the user name the client must log in as (a cluster's
	// ssh_settings.admin_username); empty accepts any.
	User string `json:"user,omitempty"`
	// Replica is the server URL (one of the agent's) to dial back when the
	// client waits at another replica than the one holding the agent's
	// stream; empty: the server the agent uses.
	Replica string `json:"replica,omitempty"`
}

// SSHTunnel opens a byte stream to the SSH server of one node of a
// compute (node "" picks an instance's node, or a cluster's only node),
// through the tide server: what an OpenSSH ProxyCommand needs, or
// golang.org/x/crypto/ssh's NewClientConn. The caller closes it.
func (c *Client) SSHTunnel(ctx context.Context, ws, compute, node string) (net.Conn, error) {
	q := url.Values{}
	if node != "" {
		q.Set("node", node)
	}
	req, err := c.newRequest(ctx, http.MethodGet, v1("workspaces", ws, "computes", compute, "ssh"), q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", SSHUpgrade)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode < 300 {
			return nil, fmt.Errorf("ssh to compute %s: the server answered %d instead of switching protocols (a proxy in between may not pass upgraded connections)", compute, resp.StatusCode)
		}
		return nil, responseError(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("ssh to compute %s: the HTTP client cannot write to an upgraded connection", compute)
	}
	return tunnelConn{rwc}, nil
}

// tunnelConn is an upgraded HTTP connection as a net.Conn. Deadlines are
// not supported (they return nil): the SSH client's own timeouts apply.
type tunnelConn struct{ io.ReadWriteCloser }

func (tunnelConn) LocalAddr() net.Addr              { return tunnelAddr{} }
func (tunnelConn) RemoteAddr() net.Addr             { return tunnelAddr{} }
func (tunnelConn) SetDeadline(time.Time) error      { return nil }
func (tunnelConn) SetReadDeadline(time.Time) error  { return nil }
func (tunnelConn) SetWriteDeadline(time.Time) error { return nil }

type tunnelAddr struct{}

func (tunnelAddr) Network() string { return SSHUpgrade }
func (tunnelAddr) String() string  { return "tide-server" }
