package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// computeAttach is az ml compute attach: a machine (type virtualmachine)
// or a Kubernetes cluster (type kubernetes) becomes a compute through the
// API.
func (r *run) computeAttach() *cobra.Command {
	var (
		file, name string
		sets       []string
	)
	cmd := &cobra.Command{
		Use:   "attach -f FILE [--name NAME] [--set key=value ...]",
		Short: "Attach an existing machine (type virtualmachine) or Kubernetes cluster (type kubernetes) as a compute, as az ml compute attach",
		Long: `Attach a machine tide reaches over SSH as a compute of one node with the
machine's own CPUs, memory and GPUs. The file is Azure's vmCompute file:
resource_id (a host name or address; tide's address: HOST[:PORT] too),
ssh_settings.admin_username, ssh_settings.ssh_private_key_file and
ssh_settings.ssh_port. The CLI sends the key file's contents; the server
keeps them as a workspace secret. Without host_key the server trusts the
key the machine shows now and pins it (trust on first use); 'tide compute
show' prints it.

Or attach a Kubernetes cluster: Azure's kubernetesCompute file (namespace,
properties.instanceTypes and defaultInstanceType) with tide's
kubeconfig_file. Each job on it gets Pods of the instance type it names
(resources.instance_type), deleted when it ends. The CLI sends the
kubeconfig's contents; the server checks with the cluster's API server that
it may manage Pods and Secrets in the namespace, then keeps the kubeconfig
as a workspace secret.

'tide compute detach NAME' undoes either.`,
		Example: `  tide compute attach -f vm.yml
  tide compute attach -f vm.yml --set address=10.0.0.5 --set ssh_settings.ssh_port=2222
  tide compute attach -f k8s.yml --set kubeconfig_file=~/.kube/config`,
		Args: r.exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("name the machine's or cluster's file with -f (type: virtualmachine or kubernetes)")
			}
			data, err := r.readSpecFile(file)
			if err != nil {
				return err
			}
			c, err := parseCompute(file, data, nameSet(name, sets))
			if err != nil {
				return err
			}
			if !c.IsAttached() {
				return usagef("%s: type %s: attach takes a type: virtualmachine or kubernetes file; create clusters and instances with 'tide compute create -f'", file, c.Type)
			}
			return r.putCompute(cmd.Context(), file, c)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "virtualmachine or kubernetes YAML file (- for standard input)")
	cmd.Flags().StringVarP(&name, "name", "n", "", "compute name (overrides the file's)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set address=HOST (repeatable)")
	return cmd
}

// putCompute sends a parsed compute file (its local files read in) and
// prints what the server answers.
func (r *run) putCompute(ctx context.Context, file string, c *api.Compute) error {
	if err := inlineScripts(file, c); err != nil {
		return err
	}
	if err := inlineKey(file, c); err != nil {
		return err
	}
	if err := inlineKubeconfig(file, c); err != nil {
		return err
	}
	cl, err := r.client()
	if err != nil {
		return err
	}
	// Attaching logs in to the machine before the server answers.
	ctx, cancel := context.WithTimeout(ctx, 2*requestTimeout)
	defer cancel()
	out, _, err := cl.PutCompute(ctx, r.workspace, c)
	if err != nil {
		return err
	}
	p := r.printer()
	return p.print(out, func(w io.Writer) { p.computeDetails(w, out) })
}

// inlineKey reads an attached machine's ssh_private_key_file (~ is the
// home folder; a relative path is relative to the YAML file) into
// ssh_private_key: the server cannot read the client's files.
func inlineKey(file string, c *api.Compute) error {
	if !c.IsAttached() || c.SSHSettings == nil || c.SSHSettings.SSHPrivateKeyFile == "" {
		return nil
	}
	const field = "ssh_settings.ssh_private_key_file"
	p, b, err := readBeside(file, field, c.SSHSettings.SSHPrivateKeyFile)
	if err != nil {
		return err
	}
	if _, err := ssh.ParsePrivateKey(b); err != nil {
		return spec.Errors{{File: file, Field: field, Message: fmt.Sprintf("%s: not an unencrypted private key (%v); tide needs an OpenSSH or PEM key without a passphrase", p, err)}}
	}
	c.SSHSettings.SSHPrivateKey, c.SSHSettings.SSHPrivateKeyFile = string(b), ""
	return nil
}

// readBeside reads the file path of field (~ is the home folder; a
// relative path is relative to the YAML file).
func readBeside(file, field, p string) (string, []byte, error) {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", nil, spec.Errors{{File: file, Field: field, Message: err.Error()}}
		}
		p = filepath.Join(home, rest)
	} else if !filepath.IsAbs(p) && file != "" && file != "-" {
		p = filepath.Join(filepath.Dir(file), p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", nil, spec.Errors{{File: file, Field: field, Message: fmt.Sprintf("%v; a relative path is relative to the YAML file", err)}}
	}
	return p, b, nil
}

// inlineKubeconfig reads an attached cluster's kubeconfig_file into
// kubeconfig: the server cannot read the client's files.
func inlineKubeconfig(file string, c *api.Compute) error {
	if !c.IsKubernetes() || c.Kubernetes.KubeconfigFile == "" {
		return nil
	}
	_, b, err := readBeside(file, "kubeconfig_file", c.Kubernetes.KubeconfigFile)
	if err != nil {
		return err
	}
	c.Kubernetes.Kubeconfig, c.Kubernetes.KubeconfigFile = string(b), ""
	return nil
}

// computeDetach is az ml compute detach.
func (r *run) computeDetach() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "detach NAME [--force]",
		Short: "Detach an attached machine or Kubernetes cluster, leaving it as it was",
		Long: `Detach a compute of type virtualmachine: tide stops its agent there, removes
what it put on the machine, and forgets the compute and its key's secret.
Detach a compute of type kubernetes: tide deletes its Pods and Secrets in
the namespace and forgets the compute and its kubeconfig's secret.
While jobs are unfinished on it the server refuses, naming them; --force
cancels them.`,
		Args: r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := r.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			if err := cl.DetachCompute(ctx, r.workspace, args[0], force); err != nil {
				return err
			}
			if r.output == "table" {
				fmt.Fprintf(r.app.Stdout, "Detaching compute %s; 'tide compute show %s' answers not found once it is done.\n", args[0], args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "cancel the compute's unfinished jobs")
	return cmd
}

// machineDetails are the lines show adds for an attached machine.
func machineDetails(c *api.Compute) []kv {
	vm := c.VirtualMachine
	port := 22
	if c.SSHSettings != nil && c.SSHSettings.SSHPort != 0 {
		port = c.SSHSettings.SSHPort
	}
	gpus := "none"
	if len(vm.GPUs) > 0 {
		gpus = strings.Join(vm.GPUs, ",")
	}
	return []kv{
		{"address", vm.Address},
		{"ssh_port", strconv.Itoa(port)},
		{"host_key", vm.HostKey},
		{"host_key_fingerprint", fmt.Sprintf("%s (%s)", vm.HostKeyFingerprint, strings.ReplaceAll(vm.HostKeySource, "_", " "))},
		{"vcpus", strconv.Itoa(vm.VCPUs)},
		{"memory_gb", strconv.FormatFloat(vm.MemoryGB, 'g', -1, 64)},
		{"gpus", gpus},
		{"credentials_secret", vm.CredentialsSecret},
	}
}

// kubernetesDetails are the lines show adds for an attached cluster.
func kubernetesDetails(c *api.Compute) []kv {
	k := c.Kubernetes
	lines := []kv{{"server", k.Server}, {"namespace", k.Namespace}, {"kubeconfig_secret", k.KubeconfigSecret}}
	if k.Properties == nil {
		return lines
	}
	lines = append(lines, kv{"default_instance_type", k.Properties.DefaultInstanceType})
	for _, name := range k.InstanceTypeNames() {
		it := k.Properties.InstanceTypes[name]
		var parts []string
		for _, r := range []struct {
			name string
			m    map[string]string
		}{{"requests", it.Resources.Requests}, {"limits", it.Resources.Limits}, {"node_selector", it.NodeSelector}} {
			if len(r.m) > 0 {
				parts = append(parts, r.name+" "+joinMap(r.m))
			}
		}
		for _, t := range it.Tolerations {
			parts = append(parts, fmt.Sprintf("toleration %s %s %s %s", t.Key, t.Operator, t.Value, t.Effect))
		}
		lines = append(lines, kv{"instance_type " + name, strings.Join(parts, "; ")})
	}
	return lines
}

// machineSize is how the compute table shows an attached machine's size.
func machineSize(vm *api.VirtualMachine) string {
	return fmt.Sprintf("%dvCPU-%gGB", vm.VCPUs, vm.MemoryGB)
}
