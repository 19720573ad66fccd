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
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		if old, err := tx.GetCompute(ctx, ws, c.Name); err == nil {
			if old.IsAttached() {
				return errorf(409, api.CodeConflict, "compute %q is attached already; an attached machine cannot be changed: detach it ('tide compute detach %s') and attach it again", c.Name, c.Name)
			}
			return errorf(409, api.CodeConflict, "compute %q exists and is a %s; choose another name", c.Name, old.Type)
		} else if !store.IsNotFound(err) {
			return err
		}
		if _, err := tx.GetObject(ctx, kindSecret, secretKey(ws, attachedSecret(c.Name))); err == nil {
			return errorf(409, api.CodeConflict, "workspace secret %q exists; it would hold this compute's key: delete it ('tide secret delete %s') or choose another compute name", attachedSecret(c.Name), attachedSecret(c.Name))
		} else if !store.IsNotFound(err) {
			return err
		}
		return s.sameMachine(ctx, tx, ws, c)
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "compute", c.Name)
	}
	found, err := s.ProbeMachine(ctx, c, sshs.SSHPrivateKey)
	if err != nil {
		var pe *ProbeError
		if errors.As(err, &pe) {
			return nil, &Error{Status: 400, Code: api.CodeValidation, Field: pe.Field,
				Msg: fmt.Sprintf("%s: attaching %s failed; nothing was stored or started: %v", pe.Field, c.Name, pe.Err)}
		}
		return nil, err
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
	now := s.now()
	c.Workspace, c.Location = ws, api.AttachedLocation(ws, c.Name)
	c.ID = "/workspaces/" + ws + "/computes/" + c.Name
	c.CreatedOn, c.ModifiedOn = now, now
	c.ProvisioningState, c.AllocationState = api.ProvisioningCreating, api.AllocationSteady
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetCompute(ctx, ws, c.Name); err == nil {
			return errorf(409, api.CodeConflict, "compute %q was created meanwhile; choose another name", c.Name)
		}
		if err := s.sameMachine(ctx, tx, ws, c); err != nil {
			return err
		}
		sec := storedSecret{Secret: api.Secret{Workspace: ws, Name: vm.CredentialsSecret, UpdatedOn: now, UpdatedBy: UserOf(ctx)}}
		sec.seal(s.SecretBox, key)
		if err := putObject(ctx, tx, kindSecret, secretKey(ws, sec.Name), sec); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		how := "trusted on first use"
		if vm.HostKeySource == api.HostKeyPinned {
			how = "pinned"
		}
		return tx.AddEvent(ctx, ws, "compute/"+c.Name, &api.Event{Time: now, Kind: "Attached", Message: fmt.Sprintf(
			"machine %s@%s port %d attached: %d vCPUs, %g GB memory, %d GPUs; host key %s (%s)",
			sshs.AdminUsername, vm.Address, sshs.SSHPort, vm.VCPUs, vm.MemoryGB, len(vm.GPUs), vm.HostKeyFingerprint, how)})
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
		return o.IsAttached() && (o.Workspace != ws || o.Name != c.Name) && strings.EqualFold(o.Address, c.Address) &&
			port(&o) == port(c) && o.SSHSettings.AdminUsername == c.SSHSettings.AdminUsername
	})
	if i >= 0 {
		return errorf(409, api.CodeConflict, "compute %q of workspace %s already attaches %s@%s port %d; detach it first or use it", all[i].Name, all[i].Workspace, c.SSHSettings.AdminUsername, c.Address, port(c))
	}
	return nil
}

// AttachedKey returns the private key of attached compute c from its
// workspace secret.
func AttachedKey(ctx context.Context, tx store.Tx, box *SecretBox, c *api.Compute) (string, error) {
	if c.VirtualMachine == nil || c.CredentialsSecret == "" {
		return "", fmt.Errorf("compute %s: no credentials recorded", c.Name)
	}
	if _, err := tx.GetObject(ctx, kindSecret, secretKey(c.Workspace, c.CredentialsSecret)); store.IsNotFound(err) {
		return "", fmt.Errorf("compute %s: its key's workspace secret %q was deleted; detach the compute and attach it again", c.Name, c.CredentialsSecret)
	}
	return openWorkspaceSecret(ctx, tx, box, c.Workspace, c.CredentialsSecret)
}

// ForgetAttached deletes what an attached compute keeps besides its
// record: the secret holding its key.
func ForgetAttached(ctx context.Context, tx store.Tx, c *api.Compute) error {
	if c.VirtualMachine == nil || c.CredentialsSecret == "" {
		return nil
	}
	err := tx.DeleteObject(ctx, kindSecret, secretKey(c.Workspace, c.CredentialsSecret))
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
		return errorf(400, api.CodeValidation, "compute %q is an attached machine, which tide does not own: detach it ('tide compute detach %s')", c.Name, c.Name)
	case !c.IsAttached() && o.Detach:
		return errorf(400, api.CodeValidation, "compute %q is a %s: only attached machines (type virtualmachine) detach; delete it ('tide compute delete %s')", c.Name, c.Type, c.Name)
	case !o.Detach || o.Force:
		return nil
	}
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
