package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	xssh "golang.org/x/crypto/ssh"
)

// An attached machine (a compute of type virtualmachine) is one host of an
// ssh provider built from the compute's record. Probe is what attaching
// asks of the machine before anything is stored or started; Detach is what
// detaching leaves behind.

// Machine is what Probe found on a host.
type Machine struct {
	// HostKey is the key the host showed, in authorized_keys format.
	HostKey string
	// VCPUs, MemoryGB and GPUs are the host's CPUs, memory and GPU
	// device indices.
	VCPUs    int
	MemoryGB float64
	GPUs     []string
}

// probeScript prints the host's CPU count, its memory in kB, then its GPU
// indices one per line.
const probeScript = `nproc 2>/dev/null || getconf _NPROCESSORS_ONLN
awk '/^MemTotal:/ {print $2}' /proc/meminfo
` + detectScript

// Probe logs in to h and reads its CPUs, memory and GPUs. With h.HostKey
// set the host must show that key (a *HostKeyError otherwise); without it
// the key the host shows is trusted and returned, for the caller to pin
// from then on (trust on first use). Login failures are
// *UnreachableErrors that say whether the host refused the key.
func Probe(ctx context.Context, h Host, timeout time.Duration) (Machine, error) {
	if h.Port == 0 {
		h.Port = 22
	}
	cfg, err := loginConfig(h)
	if err != nil {
		return Machine{}, err
	}
	var m Machine
	if h.HostKey != "" {
		pub, _, _, _, err := xssh.ParseAuthorizedKey([]byte(h.HostKey))
		if err != nil {
			return Machine{}, fmt.Errorf("host_key: must be a public key in authorized_keys format (%v)", err)
		}
		cfg.HostKeyCallback = pinnedKey(pub)
		cfg.HostKeyAlgorithms = algorithmsFor(pub.Type())
		m.HostKey = strings.TrimSpace(string(xssh.MarshalAuthorizedKey(pub)))
	} else {
		cfg.HostKeyCallback = func(_ string, _ net.Addr, key xssh.PublicKey) error {
			m.HostKey = strings.TrimSpace(string(xssh.MarshalAuthorizedKey(key)))
			return nil
		}
	}
	r := &remote{Host: h, config: cfg}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := r.dial(ctx)
	if err != nil {
		return Machine{}, &UnreachableError{Host: h.name(), Err: loginProblem(err, h)}
	}
	defer c.Close()
	out, _, err := r.session(ctx, c, probeScript, nil)
	if err != nil {
		return Machine{}, fmt.Errorf("reading the CPUs and memory of %s: %w", h.name(), err)
	}
	lines := strings.Fields(string(out))
	if len(lines) < 2 {
		return Machine{}, fmt.Errorf("reading the CPUs and memory of %s: unexpected answer %q (tide needs a Linux host with nproc and /proc/meminfo)", h.name(), out)
	}
	if m.VCPUs, err = strconv.Atoi(lines[0]); err != nil || m.VCPUs < 1 {
		return Machine{}, fmt.Errorf("reading the CPUs of %s: unexpected answer %q", h.name(), lines[0])
	}
	kb, err := strconv.ParseFloat(lines[1], 64)
	if err != nil {
		return Machine{}, fmt.Errorf("reading the memory of %s: unexpected answer %q", h.name(), lines[1])
	}
	m.MemoryGB = float64(int(kb/1024/1024*10)) / 10 // one decimal, rounded down
	m.GPUs = lines[2:]
	return m, nil
}

// loginProblem says in words why a login failed.
func loginProblem(err error, h Host) error {
	var hk *HostKeyError
	switch {
	case errors.As(err, &hk):
		return err
	case strings.Contains(err.Error(), "unable to authenticate"):
		return fmt.Errorf("the host refused the key for user %s (add its public key to ~%s/.ssh/authorized_keys there): %w", h.User, h.User, err)
	}
	return err
}

// cleanScript removes the binary and the folders tide made under $R once
// no node folder is left there; what else is in $R stays.
const cleanScript = `[ -d "$R" ] || exit 0
cd "$R" || exit 1
R=$(pwd)
[ -z "$(ls -A nodes 2>/dev/null)" ] || { echo busy; exit 0; }
rm -f bin/tide bin/.tide.*
rmdir nodes bin 2>/dev/null
cd / && rmdir "$R" 2>/dev/null
echo clean
`

// Detach removes from every host what the provider put there (the tide
// binary and its folders) once no node is left on it, leaving the host as
// it was before the first node. Call it after deleting every node.
func (p *Provider) Detach(ctx context.Context) error {
	var errs []error
	for _, h := range p.hosts {
		out, err := h.run(ctx, p.cfg.Timeout, "R="+quote(h.Dir)+"\n"+cleanScript, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("cleaning up host %s: %w", h.name(), err))
			continue
		}
		if strings.TrimSpace(string(out)) == "busy" {
			errs = append(errs, fmt.Errorf("cleaning up host %s: %s/nodes still holds node folders", h.name(), h.Dir))
		}
	}
	return errors.Join(errs...)
}
