package slurm_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/internal/provider/providertest"
)

// cluster is a real Slurm cluster on this machine, private to the test:
// its own munged (own key and socket), one slurmctld and three slurmd
// (n1..n3, 4 CPUs and 16000 MB each, all on localhost with distinct
// ports), configured in a temp dir. Partition "debug" (default) is
// preemptable by partition "urgent".
type cluster struct {
	dir  string
	conf string
	cmds []*exec.Cmd
}

var slurmBins = []string{"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo"}

// clusterMissing says what the machine lacks to start a cluster, or "".
func clusterMissing() string {
	if os.Geteuid() != 0 {
		return "not root (slurmd runs jobs as their user)"
	}
	for _, bin := range slurmBins {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " not found (apt-get install slurm-wlm munge)"
		}
	}
	return ""
}

func startCluster() (_ *cluster, err error) {
	dir, err := os.MkdirTemp("", "tide-slurm-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	// munged refuses folders other users may write to.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []string{"state", "log", "spool/n1", "spool/n2", "spool/n3"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o600); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "munge.sock")
	if err := c.start("munged", "/usr/sbin/munged", "-F", "-f", "--socket="+sock, "--key-file="+filepath.Join(dir, "munge.key"),
		"--log-file="+filepath.Join(dir, "log/munged.log"), "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed")); err != nil {
		return nil, err
	}
	if err := waitFor(10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
		return nil, fmt.Errorf("munged did not create its socket: %w", err)
	}
	ports, err := providertest.FreePorts(4)
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`ClusterName=tidetest
SlurmctldHost=localhost
SlurmctldPort=%[2]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[1]s/munge.sock
CredType=cred/munge
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool/%%n
SlurmctldPidFile=%[1]s/slurmctld.pid
SlurmdPidFile=%[1]s/slurmd.%%n.pid
SlurmctldLogFile=%[1]s/log/slurmctld.log
SlurmdLogFile=%[1]s/log/slurmd.%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
MinJobAge=60
KillWait=5
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=n1 NodeHostname=localhost Port=%[3]d CPUs=4 RealMemory=16000 State=UNKNOWN
NodeName=n2 NodeHostname=localhost Port=%[4]d CPUs=4 RealMemory=16000 State=UNKNOWN
NodeName=n3 NodeHostname=localhost Port=%[5]d CPUs=4 RealMemory=16000 State=UNKNOWN
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=n[1-3] MaxTime=INFINITE State=UP PriorityTier=10
`, dir, ports[0], ports[1], ports[2], ports[3])
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := c.start("slurmctld", "/usr/sbin/slurmctld", "-D", "-i", "-f", c.conf); err != nil {
		return nil, err
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := c.start("slurmd-"+n, "/usr/sbin/slurmd", "-D", "-N", n, "-f", c.conf); err != nil {
			return nil, err
		}
	}
	err = waitFor(30*time.Second, func() bool {
		out, err := c.run("sinfo", "--noheader", "--partition=debug", "--Node", "--format=%N %T")
		return err == nil && strings.Count(out, "idle") == 3
	})
	if err != nil {
		out, _ := c.run("sinfo", "--Node")
		log, _ := os.ReadFile(filepath.Join(dir, "log/slurmctld.log"))
		return nil, fmt.Errorf("Slurm nodes not idle: %w\n%s\n%s", err, out, log)
	}
	return c, nil
}

// start runs a daemon in the foreground, logging to log/<name>.out.
func (c *cluster) start(name, bin string, args ...string) error {
	out, err := os.Create(filepath.Join(c.dir, "log", name+".out"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	c.cmds = append(c.cmds, cmd)
	return nil
}

// run runs a Slurm client command against the cluster.
func (c *cluster) run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// stop cancels every job, then stops the daemons in reverse order.
func (c *cluster) stop() {
	if len(c.cmds) > 1 {
		_, _ = c.run("scancel", "--me")
		_ = waitFor(15*time.Second, func() bool {
			out, err := c.run("squeue", "--me", "--noheader")
			return err != nil || strings.TrimSpace(out) == ""
		})
	}
	for i := len(c.cmds) - 1; i >= 0; i-- {
		cmd := c.cmds[i]
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(c.dir)
}

func waitFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out after " + d.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

var (
	testCluster    *cluster
	testClusterErr error
)

// requireCluster returns the cluster, or skips the test (fails it under
// CI) when the machine cannot run one.
func requireCluster(t *testing.T) *cluster {
	t.Helper()
	if testCluster != nil {
		return testCluster
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("slurm cluster: %v", testClusterErr)
	}
	t.Skipf("slurm cluster: %v", testClusterErr)
	return nil
}

func setupCluster() func() {
	if miss := clusterMissing(); miss != "" {
		testClusterErr = errors.New(miss)
		return func() {}
	}
	testCluster, testClusterErr = startCluster()
	if testClusterErr != nil {
		return func() {}
	}
	return testCluster.stop
}
