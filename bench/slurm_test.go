package bench

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/internal/freeport"
)

// slurmCluster is one slurmctld and one slurmd per node on this host, with a
// munged of its own, all running from a temporary folder.
type slurmCluster struct {
	t       testing.TB
	dir     string
	env     []string
	ctld    *exec.Cmd
	daemons []*exec.Cmd
	waits   []chan struct{}
}

// slurmBinaries finds Slurm's and munge's programs (Debian: slurm-wlm, munge).
func slurmBinaries(t testing.TB) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for _, name := range []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo"} {
		p, err := exec.LookPath(name)
		if err != nil {
			if _, serr := os.Stat("/usr/sbin/" + name); serr == nil {
				p, err = "/usr/sbin/"+name, nil
			}
		}
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found: CI must install slurm-wlm and munge (see .ci/run)", name)
			}
			t.Skipf("%s not found: install slurm-wlm and munge (make bench does) to compare with Slurm", name)
		}
		paths[name] = p
	}
	return paths
}

// slurmConf is tuned for throughput following SchedMD's high-throughput
// guide: the builtin FIFO scheduler, no accounting or job accounting
// gathering, no scheduling delay after a submit, completed jobs purged after
// 2 s, and a large job table. Each node has one CPU so that, like tide's
// nodes, it runs one job at a time.
const slurmConf = `ClusterName=bench
SlurmctldHost=localhost
SlurmctldPort={{ctldPort}}
SlurmUser={{user}}
SlurmdUser={{user}}
AuthType=auth/munge
AuthInfo=socket={{dir}}/munge.sock
CredType=cred/munge
StateSaveLocation={{dir}}/state
SlurmdSpoolDir={{dir}}/spool/%n
SlurmctldPidFile={{dir}}/slurmctld.pid
SlurmdPidFile={{dir}}/slurmd.%n.pid
SlurmctldLogFile={{dir}}/slurmctld.log
SlurmdLogFile={{dir}}/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=10000,max_rpc_cnt=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MaxJobCount=100000
MinJobAge=2
ReturnToService=2
PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
`

func startSlurm(t testing.TB, nodes int) *slurmCluster {
	t.Helper()
	bin := slurmBinaries(t)
	// Not t.TempDir: its long path would push the munge socket path past
	// the 108-byte limit of a Unix socket address.
	dir, err := os.MkdirTemp("", "tide-bench-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	c := &slurmCluster{t: t, dir: dir, env: append(os.Environ(), "SLURM_CONF="+filepath.Join(dir, "slurm.conf"))}
	t.Cleanup(func() {
		c.stop()
		os.RemoveAll(dir)
	})
	for _, d := range []string{"state", "spool", "out"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	user := "root"
	if os.Geteuid() != 0 {
		user = os.Getenv("USER")
	}
	conf := strings.NewReplacer("{{dir}}", dir, "{{ctldPort}}", strconv.Itoa(freeport.For(t)), "{{user}}", user).Replace(slurmConf)
	for i := 1; i <= nodes; i++ {
		conf += fmt.Sprintf("NodeName=n%d NodeHostname=localhost Port=%d CPUs=1 State=UNKNOWN\n", i, freeport.For(t))
	}
	if err := os.WriteFile(filepath.Join(dir, "slurm.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.daemon(bin["munged"], "-F", "-f", "-S", filepath.Join(dir, "munge.sock"), "--key-file="+filepath.Join(dir, "munge.key"),
		"--log-file="+filepath.Join(dir, "munged.log"), "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed"))
	poll(t, "munged's socket", 10*time.Second, 10*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Join(dir, "munge.sock"))
		return err == nil
	})
	c.ctld = c.daemon(bin["slurmctld"], "-D", "-i", "-f", filepath.Join(dir, "slurm.conf"))
	for i := 1; i <= nodes; i++ {
		c.daemon(bin["slurmd"], "-D", "-f", filepath.Join(dir, "slurm.conf"), "-N", fmt.Sprintf("n%d", i))
	}
	poll(t, fmt.Sprintf("%d idle Slurm nodes", nodes), 60*time.Second, 100*time.Millisecond, func() bool {
		out, err := c.run("sinfo", "-h", "-N", "-o", "%T")
		return err == nil && strings.Count(string(out), "idle") == nodes
	})
	return c
}

// daemon starts a daemon in the foreground; stop ends it.
func (c *slurmCluster) daemon(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.env
	cmd.Dir = c.dir
	log, err := os.Create(filepath.Join(c.dir, filepath.Base(name)+strconv.Itoa(len(c.daemons))+".out"))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	c.daemons = append(c.daemons, cmd)
	c.waits = append(c.waits, done)
	return cmd
}

func (c *slurmCluster) stop() {
	// Nodes and controller first, munged last: they need it to say goodbye.
	for i := len(c.daemons) - 1; i >= 0; i-- {
		_ = c.daemons[i].Process.Signal(syscall.SIGTERM)
		select {
		case <-c.waits[i]:
		case <-time.After(10 * time.Second):
			_ = c.daemons[i].Process.Kill()
			<-c.waits[i]
		}
	}
	c.daemons = nil
}

func (c *slurmCluster) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return out, nil
}

func (c *slurmCluster) sbatch(args ...string) string {
	out, err := c.run("sbatch", append([]string{"--parsable"}, args...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	return id
}

func (c *slurmCluster) usage() procUsage {
	u, err := readProc(c.ctld.Process.Pid)
	if err != nil {
		c.t.Fatal(err)
	}
	return u
}

func (c *slurmCluster) logSize() int64 {
	fi, err := os.Stat(filepath.Join(c.dir, "slurmctld.log"))
	if err != nil {
		c.t.Fatal(err)
	}
	return fi.Size()
}

// lastCompletion returns the time of the last "_job_complete: JobId=N done"
// line slurmctld logged after offset (its log has millisecond times).
func (c *slurmCluster) lastCompletion(offset int64) (time.Time, int) {
	b, err := os.ReadFile(filepath.Join(c.dir, "slurmctld.log"))
	if err != nil {
		c.t.Fatal(err)
	}
	var last time.Time
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b[offset:]))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "_job_complete: JobId=") || !strings.HasSuffix(line, " done") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "["), "]")
		at, err := time.ParseInLocation("2006-01-02T15:04:05.000", ts, time.Local)
		if err != nil {
			c.t.Fatalf("slurmctld log time %q: %v", ts, err)
		}
		n++
		if at.After(last) {
			last = at
		}
	}
	return last, n
}

// slurmDispatch submits n `sbatch --wrap=true` from Nodes goroutines and
// waits until the queue is empty. The end is the last job completion in
// slurmctld's log (Slurm keeps no end times without accounting).
func (c *slurmCluster) slurmDispatch(n int) dispatchResult {
	t := c.t
	off := c.logSize()
	u0 := c.usage()
	t0 := time.Now()
	work := make(chan int, n)
	for i := range n {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	errs := make(chan error, Nodes)
	for range Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				if _, err := c.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap=true"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var end time.Time
	poll(t, fmt.Sprintf("%d Slurm jobs to end", n), 30*time.Minute, 50*time.Millisecond, func() bool {
		var done int
		end, done = c.lastCompletion(off)
		return done >= n
	})
	u1 := c.usage()
	return dispatchResult{Rate: float64(n) / end.Sub(t0).Seconds(), CPU: u1.CPU - u0.CPU}
}

// slurmLatency submits m jobs one at a time and returns, for each, the time
// from calling sbatch to the job's first output line appearing in its
// output file (polled every millisecond).
func (c *slurmCluster) slurmLatency(m int) []time.Duration {
	t := c.t
	var lat []time.Duration
	for i := range m {
		out := filepath.Join(c.dir, "out", fmt.Sprintf("lat%d.out", i))
		t0 := time.Now()
		id := c.sbatch("-o", out, "--wrap=echo first")
		poll(t, "Slurm job "+id+"'s first line", time.Minute, time.Millisecond, func() bool {
			b, _ := os.ReadFile(out)
			return bytes.Contains(b, []byte("\n"))
		})
		lat = append(lat, time.Since(t0))
		poll(t, "Slurm job "+id+" to leave the queue", time.Minute, 10*time.Millisecond, func() bool {
			out, err := c.run("squeue", "-h", "-j", id, "-t", "PENDING,CONFIGURING,RUNNING,COMPLETING", "-o", "%T")
			return err != nil || len(bytes.TrimSpace(out)) == 0
		})
	}
	return lat
}
