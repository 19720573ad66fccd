package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// Attaching a machine (a compute of type virtualmachine) logs in to it
// first (ProbeMachine), so a machine that refuses the key or shows another
// host key than the pinned one is refused with nothing stored. The record
// keeps the host key (pinned from then on), the machine's CPUs, memory
// and GPUs; the private key goes into a workspace secret that goes with
// the compute. The controller starts the node through the ssh provider it
// builds from the record.

// MachineProbe logs in to the machine an attached compute names, with
// privateKey, and returns its host key and capacity (HostKey, VCPUs,
// MemoryGB, GPUs). A failure the user can fix is a *ProbeError.
type MachineProbe func(ctx context.Context, c *api.Compute, privateKey string) (api.VirtualMachine, error)

// ProbeError is a failed login to a machine being attached, with the field
// of the compute's file to look at.
type ProbeError struct {
	Field string
	Err   error
}

func (e *ProbeError) Error() string { return e.Err.Error() }
func (e *ProbeError) Unwrap() error { return e.Err }

// attachedSecret names the workspace secret holding an attached compute's
// private key.
func attachedSecret(name string) string { return name + "-ssh-private-key" }

// attach creates an attached compute: it logs in to the machine, then
// stores the compute and its secret in one transaction.
func (s *Service) attach(ctx context.Context, ws string, c *api.Compute) (*api.Compute, error) {
	vm, sshs := c.VirtualMachine, c.SSHSettings
	if sshs.SSHPrivateKey == "" {
		return nil, &Error{Status: 400, Code: api.CodeValidation, Field: "ssh_settings.ssh_private_key_file",
			Msg: "ssh_settings.ssh_private_key_file: the server cannot read files of the client; send the key itself as ssh_settings.ssh_private_key ('tide compute attach -f FILE' does)"}
	}
	if s.ProbeMachine == nil {
		return nil, errorf(501, api.CodeNotSupported, "this server cannot attach machines")
	}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if err := s.attachable(ctx, tx, ws, c.Name, attachedSecret(c.Name)); err != nil {
			return err
		}
		return s.sameMachine(ctx, tx, ws, c)
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "compute", c.Name)
	}
	found, err := s.ProbeMachine(ctx, c, sshs.SSHPrivateKey)
	if err != nil {
		return nil, probeFailed(c.Name, "nothing was stored or started", err)
	}
	vm.VCPUs, vm.MemoryGB, vm.GPUs = found.VCPUs, found.MemoryGB, found.GPUs
	vm.HostKeySource = api.HostKeyPinned
	if vm.HostKey == "" {
		vm.HostKeySource = api.HostKeyFirstUse
	}
	vm.HostKey = found.HostKey
	if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(found.HostKey)); err == nil {
		vm.HostKeyFingerprint = ssh.FingerprintSHA256(pub)
	}
	vm.CredentialsSecret = attachedSecret(c.Name)
	key := sshs.SSHPrivateKey
	sshs.SSHPrivateKey, sshs.SSHPrivateKeyFile, sshs.HasSSHPrivateKey = "", "", true
	if sshs.SSHPort == 0 {
		sshs.SSHPort = 22
	}
	how := "trusted on first use"
	if vm.HostKeySource == api.HostKeyPinned {
		how = "pinned"
	}
	msg := fmt.Sprintf("machine %s@%s port %d attached: %d vCPUs, %g GB memory, %d GPUs; host key %s (%s)",
		sshs.AdminUsername, vm.Address, sshs.SSHPort, vm.VCPUs, vm.MemoryGB, len(vm.GPUs), vm.HostKeyFingerprint, how)
	return s.storeAttached(ctx, ws, c, key, msg, func(tx store.Tx) error { return s.sameMachine(ctx, tx, ws, c) })
}

// probeFailed is the answer to a failed probe of compute name being
// attached: a *ProbeError becomes a 400 naming its field.
func probeFailed(name, nothing string, err error) error {
	var pe *ProbeError
	if !errors.As(err, &pe) {
		return err
	}
	return &Error{Status: 400, Code: api.CodeValidation, Field: pe.Field,
		Msg: fmt.Sprintf("%s: attaching %s failed; %s: %v", pe.Field, name, nothing, pe.Err)}
}

// attachable refuses to attach compute name when a compute of that name
// exists, or the workspace secret that would hold its credentials does.
func (s *Service) attachable(ctx context.Context, tx store.Tx, ws, name, secret string) error {
	if _, err := s.workspace(ctx, tx, ws); err != nil {
		return err
	}
	if old, err := tx.GetCompute(ctx, ws, name); err == nil {
		if old.IsAttached() {
			return errorf(409, api.CodeConflict, "compute %q is attached already; an attached compute cannot be changed: detach it ('tide compute detach %s') and attach it again", name, name)
		}
		return errorf(409, api.CodeConflict, "compute %q exists and is a %s; choose another name", name, old.Type)
	} else if !store.IsNotFound(err) {
		return err
	}
	if _, err := tx.GetObject(ctx, kindSecret, secretKey(ws, secret)); err == nil {
		return errorf(409, api.CodeConflict, "workspace secret %q exists; it would hold this compute's credentials: delete it ('tide secret delete %s') or choose another compute name", secret, secret)
	} else if !store.IsNotFound(err) {
		return err
	}
	return nil
}

// storeAttached stores attached compute c, checked and probed, with its
// credentials sealed in its workspace secret, in one transaction; check
// runs in it first.
func (s *Service) storeAttached(ctx context.Context, ws string, c *api.Compute, credentials, event string, check func(store.Tx) error) (*api.Compute, error) {
	now := s.now()
	c.Workspace, c.Location = ws, api.AttachedLocation(ws, c.Name)
	c.ID = "/workspaces/" + ws + "/computes/" + c.Name
	c.CreatedOn, c.ModifiedOn = now, now
	c.ProvisioningState, c.AllocationState = api.ProvisioningCreating, api.AllocationSteady
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetCompute(ctx, ws, c.Name); err == nil {
			return errorf(409, api.CodeConflict, "compute %q was created meanwhile; choose another name", c.Name)
		}
		if err := check(tx); err != nil {
			return err
		}
		sec := storedSecret{Secret: api.Secret{Workspace: ws, Name: c.CredentialsSecretName(), UpdatedOn: now, UpdatedBy: UserOf(ctx)}}
		sec.seal(s.SecretBox, credentials)
		if err := putObject(ctx, tx, kindSecret, secretKey(ws, sec.Name), sec); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		return tx.AddEvent(ctx, ws, "compute/"+c.Name, &api.Event{Time: now, Kind: "Attached", Message: event})
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "compute", c.Name)
	}
	s.notify()
	r := c.Redacted()
	return &r, nil
}

// sameMachine refuses a second compute on the same login and port, in
// any workspace: both would run a node in the same folder there.
func (s *Service) sameMachine(ctx context.Context, tx store.Tx, ws string, c *api.Compute) error {
	all, err := tx.ListComputes(ctx, "")
	if err != nil {
		return err
	}
	port := func(x *api.Compute) int {
		if x.SSHSettings == nil || x.SSHSettings.SSHPort == 0 {
			return 22
		}
		return x.SSHSettings.SSHPort
	}
	i := slices.IndexFunc(all, func(o api.Compute) bool {
		return o.VirtualMachine != nil && o.IsAttached() && (o.Workspace != ws || o.Name != c.Name) && strings.EqualFold(o.Address, c.Address) &&
			port(&o) == port(c) && o.SSHSettings.AdminUsername == c.SSHSettings.AdminUsername
	})
	if i >= 0 {
		return errorf(409, api.CodeConflict, "compute %q of workspace %s already attaches %s@%s port %d; detach it first or use it", all[i].Name, all[i].Workspace, c.SSHSettings.AdminUsername, c.Address, port(c))
	}
	return nil
}

// AttachedCredentials returns the credentials of attached compute c (a
// machine's key, a cluster's kubeconfig) from its workspace secret.
func AttachedCredentials(ctx context.Context, tx store.Tx, box *SecretBox, c *api.Compute) (string, error) {
	name := c.CredentialsSecretName()
	if name == "" {
		return "", fmt.Errorf("compute %s: no credentials recorded", c.Name)
	}
	if _, err := tx.GetObject(ctx, kindSecret, secretKey(c.Workspace, name)); store.IsNotFound(err) {
		return "", fmt.Errorf("compute %s: its credentials' workspace secret %q was deleted; detach the compute and attach it again", c.Name, name)
	}
	return openWorkspaceSecret(ctx, tx, box, c.Workspace, name)
}

// ForgetAttached deletes what an attached compute keeps besides its
// record: the secret holding its credentials.
func ForgetAttached(ctx context.Context, tx store.Tx, c *api.Compute) error {
	name := c.CredentialsSecretName()
	if name == "" {
		return nil
	}
	err := tx.DeleteObject(ctx, kindSecret, secretKey(c.Workspace, name))
	if store.IsNotFound(err) {
		return nil
	}
	return err
}

// DeleteOptions say how a compute goes.
type DeleteOptions struct {
	// Detach asks to detach an attached compute (Azure's
	// underlyingResourceAction=Detach): its node stops and the machine is
	// left as it was. Only attached computes detach, and they only detach.
	Detach bool
	// Force cancels the compute's unfinished jobs; without it a detach
	// with unfinished jobs is refused (409, naming them).
	Force bool
}

// checkDelete applies DeleteOptions to compute c.
func checkDelete(ctx context.Context, tx store.Tx, c *api.Compute, o DeleteOptions) error {
	switch {
	case c.IsAttached() && !o.Detach:
		return errorf(400, api.CodeValidation, "compute %q is an attached %s, which tide does not own: detach it ('tide compute detach %s')", c.Name, c.Type, c.Name)
	case !c.IsAttached() && o.Detach:
		return errorf(400, api.CodeValidation, "compute %q is a %s: only attached computes (type virtualmachine or kubernetes) detach; delete it ('tide compute delete %s')", c.Name, c.Type, c.Name)
	case !o.Detach || o.Force:
		return nil
	}
	// A cluster's jobs (on computes of their own) are its too.
	jobs, err := tx.ListJobs(ctx, store.JobFilter{Workspace: c.Workspace, Compute: c.Name, Statuses: []string{api.JobNotStarted, api.JobQueued, api.JobPreparing, api.JobRunning, api.JobFinalizing, api.JobCancelRequested}})
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name+" ("+j.Status+")")
	}
	return errorf(409, api.CodeConflict, "compute %q has unfinished jobs: %s; wait for them, cancel them, or detach with --force to cancel them", c.Name, strings.Join(names, ", "))
}
