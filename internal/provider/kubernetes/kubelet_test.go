package kubernetes_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
)

// The test cluster's one Node, and the label its pool is known by.
const (
	testNode  = "tide-test-node"
	poolLabel = "tide-test/pool"
)

// nodeLabels are testNode's labels, for the scheduler's node selector check.
var nodeLabels = map[string]string{"kubernetes.io/hostname": testNode, poolLabel: "main"}

// kubelet plays the parts of the scheduler and of testNode's kubelet, as
// far as tide's Pods need them, through the real API server: it binds a
// pending Pod whose node selector matches testNode (Binding subresource)
// or marks it Unschedulable with the scheduler's message; it runs each
// bound Pod's container as a local process, with the env resolved from
// the Pod spec and its Secret and the emptyDir mounted (its path mapped to
// a folder of the test); it reports the Pod's status (Running, then
// Succeeded or Failed) through pods/status; and it stops the process of a
// Pod being deleted (SIGTERM at once) and then removes the Pod (grace
// period 0), as a kubelet does when the container has stopped.
type kubelet struct {
	cs     *clientset.Clientset
	dir    string
	cancel context.CancelFunc
	done   chan struct{}
	// cordoned leaves every Pod unscheduled, as a cordoned Node would.
	cordoned atomic.Bool

	mu     sync.Mutex
	agents map[types.UID]*agentProc
}

// agentProc is a bound Pod's running container.
type agentProc struct {
	cmd      *exec.Cmd
	done     chan struct{}
	exit     int
	started  time.Time
	finished time.Time
	termSent bool
	// evicted: the kubelet itself ended the container and reported the
	// Pod (pressureEvict); the loop must not report it again.
	evicted atomic.Bool
}

func startKubelet(cs *clientset.Clientset, dir string) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{cs: cs, dir: dir, cancel: cancel, done: make(chan struct{}), agents: map[types.UID]*agentProc{}}
	go k.loop(ctx)
	return k
}

func (k *kubelet) loop(ctx context.Context) {
	defer close(k.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		k.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stop ends the loop and kills every agent still running.
func (k *kubelet) stop() {
	k.cancel()
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, a := range k.agents {
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
}

func (k *kubelet) sync(ctx context.Context) {
	pods, err := k.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	seen := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		seen[pod.UID] = true
		switch pod.Spec.NodeName {
		case "":
			k.schedule(ctx, pod)
		case testNode:
			k.syncPod(ctx, pod)
		}
	}
	// A Pod removed at once (grace period 0) loses its container.
	k.mu.Lock()
	defer k.mu.Unlock()
	for uid, a := range k.agents {
		if !seen[uid] {
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.done
			delete(k.agents, uid)
		}
	}
}

// The scheduler's messages for a Pod no node selects, and for a Pod
// while the only Node is cordoned.
const (
	unschedulable = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
	cordonedMsg   = "0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)

func (k *kubelet) schedule(ctx context.Context, pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil {
		return
	}
	msg := ""
	if k.cordoned.Load() {
		msg = cordonedMsg
	}
	for key, v := range pod.Spec.NodeSelector {
		if nodeLabels[key] != v {
			msg = unschedulable
		}
	}
	if msg != "" {
		var conds []corev1.PodCondition
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				if c.Message == msg {
					return
				}
				continue
			}
			conds = append(conds, c)
		}
		pod.Status.Conditions = append(conds, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: msg, LastTransitionTime: metav1.Now(),
		})
		_, _ = k.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return
	}
	_ = k.cs.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: testNode},
	}, metav1.CreateOptions{})
}

func (k *kubelet) syncPod(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	a := k.agents[pod.UID]
	k.mu.Unlock()
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if pod.DeletionTimestamp != nil {
		if g := pod.DeletionGracePeriodSeconds; g != nil && *g == 0 {
			return // removed already; a finalizer keeps it
		}
		if a != nil && !exited(a) {
			if !a.termSent {
				_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGTERM)
				a.termSent = true
			}
			return
		}
		if a != nil && !terminal {
			k.reportExit(ctx, pod, a)
		}
		// The container is gone: the kubelet removes the Pod.
		_ = k.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		return
	}
	switch {
	case terminal:
	case a == nil:
		k.startPod(ctx, pod)
	case exited(a) && !a.evicted.Load():
		k.reportExit(ctx, pod, a)
	}
}

func exited(a *agentProc) bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// varRef is a $(VAR) reference in a container's command or env.
var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand resolves $(VAR) references the way Kubernetes does: defined
// variables are replaced, undefined ones left as written, $$ is $.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func (k *kubelet) startPod(ctx context.Context, pod *corev1.Pod) {
	c := pod.Spec.Containers[0]
	podDir := filepath.Join(k.dir, string(pod.UID))
	// Mounts: an emptyDir is a folder of the Pod; its mount path is
	// mapped to it in the command, the working dir and the env.
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && v.EmptyDir != nil {
				mounts[vm.MountPath] = filepath.Join(podDir, "volumes", v.Name)
			}
		}
	}
	mapPath := func(s string) string {
		for from, to := range mounts {
			if s == from || strings.HasPrefix(s, from+"/") {
				return to + strings.TrimPrefix(s, from)
			}
		}
		return s
	}
	env := map[string]string{}
	var order []string
	for _, e := range c.Env {
		val := expand(e.Value, env)
		if src := e.ValueFrom; src != nil {
			switch {
			case src.SecretKeyRef != nil:
				s, err := k.cs.CoreV1().Secrets(pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					k.waiting(ctx, pod, "CreateContainerConfigError", fmt.Sprintf("secret %q not found", src.SecretKeyRef.Name))
					return
				}
				b, ok := s.Data[src.SecretKeyRef.Key]
				if !ok {
					k.waiting(ctx, pod, "CreateContainerConfigError", fmt.Sprintf("couldn't find key %s in Secret %s/%s", src.SecretKeyRef.Key, pod.Namespace, s.Name))
					return
				}
				val = string(b)
			case src.FieldRef != nil && src.FieldRef.FieldPath == "status.podIP":
				val = "127.0.0.1"
			default:
				k.waiting(ctx, pod, "CreateContainerConfigError", "the test kubelet cannot resolve env "+e.Name)
				return
			}
		}
		if _, ok := env[e.Name]; !ok {
			order = append(order, e.Name)
		}
		env[e.Name] = val
	}
	var args []string
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		args = append(args, mapPath(expand(a, env)))
	}
	for _, d := range append([]string{podDir}, slices.Collect(maps.Values(mounts))...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			k.waiting(ctx, pod, "CreateContainerError", err.Error())
			return
		}
	}
	logf, err := os.Create(filepath.Join(podDir, "container.log"))
	if err != nil {
		k.waiting(ctx, pod, "CreateContainerError", err.Error())
		return
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	// A container sees its own env, not the test's (a PATH for the jobs'
	// shells aside).
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + podDir}
	if v := os.Getenv("TIDE_TEST_LOG"); v != "" {
		cmd.Env = append(cmd.Env, "TIDE_TEST_LOG="+v)
	}
	for _, n := range order {
		cmd.Env = append(cmd.Env, n+"="+mapPath(env[n]))
	}
	cmd.Dir = mapPath(c.WorkingDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		k.waiting(ctx, pod, "StartError", err.Error())
		return
	}
	a := &agentProc{cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() {
		err := cmd.Wait()
		a.finished = time.Now()
		if cmd.ProcessState != nil {
			a.exit = cmd.ProcessState.ExitCode()
		} else if err != nil {
			a.exit = 128
		}
		close(a.done)
	}()
	k.mu.Lock()
	k.agents[pod.UID] = a
	k.mu.Unlock()

	now := metav1.NewTime(a.started)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.HostIP, pod.Status.PodIP = "127.0.0.1", "127.0.0.1"
	pod.Status.HostIPs, pod.Status.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
	pod.Status.StartTime = &now
	pod.Status.Conditions = conditions(pod.Status.Conditions, now, corev1.ConditionTrue)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	k.updateStatus(ctx, pod)
}

// conditions sets the Pod's lifecycle conditions, keeping the others
// (DisruptionTarget).
func conditions(old []corev1.PodCondition, now metav1.Time, ready corev1.ConditionStatus) []corev1.PodCondition {
	set := map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodScheduled: corev1.ConditionTrue, corev1.PodInitialized: corev1.ConditionTrue,
		corev1.ContainersReady: ready, corev1.PodReady: ready,
	}
	var out []corev1.PodCondition
	for _, c := range old {
		if _, ok := set[c.Type]; !ok {
			out = append(out, c)
		}
	}
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		out = append(out, corev1.PodCondition{Type: t, Status: set[t], LastTransitionTime: now})
	}
	return out
}

// updateStatus writes the status; a conflict is retried on the next sync
// (startPod is not repeated: the agent is recorded).
func (k *kubelet) updateStatus(ctx context.Context, pod *corev1.Pod) {
	for range 5 {
		_, err := k.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return
		}
		fresh, err := k.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return
		}
		st := pod.Status
		st.Conditions = conditionsMerged(fresh.Status.Conditions, st.Conditions)
		pod = fresh
		pod.Status = st
	}
}

// conditionsMerged keeps conditions the API server added meanwhile
// (DisruptionTarget on an eviction).
func conditionsMerged(fresh, mine []corev1.PodCondition) []corev1.PodCondition {
	have := map[corev1.PodConditionType]bool{}
	for _, c := range mine {
		have[c.Type] = true
	}
	out := append([]corev1.PodCondition(nil), mine...)
	for _, c := range fresh {
		if !have[c.Type] {
			out = append(out, c)
		}
	}
	return out
}

// waiting reports the container as waiting with reason (the kubelet
// tries again on the next sync).
func (k *kubelet) waiting(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	c := pod.Spec.Containers[0]
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
	}}
	k.updateStatus(ctx, pod)
}

// reportExit reports the ended container: Succeeded on exit code 0, else
// Failed.
func (k *kubelet) reportExit(ctx context.Context, pod *corev1.Pod, a *agentProc) {
	c := pod.Spec.Containers[0]
	phase, reason := corev1.PodSucceeded, "Completed"
	if a.exit != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	pod.Status.Phase = phase
	pod.Status.Conditions = conditions(pod.Status.Conditions, metav1.NewTime(a.finished), corev1.ConditionFalse)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image, Started: new(false),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: int32(a.exit), Reason: reason,
			StartedAt: metav1.NewTime(a.started), FinishedAt: metav1.NewTime(a.finished),
		}},
	}}
	k.updateStatus(ctx, pod)
}

// pressureEvict evicts the Pod as a kubelet under node pressure does:
// it kills the container and reports the Pod Failed with reason Evicted.
func (k *kubelet) pressureEvict(ctx context.Context, pod *corev1.Pod, msg string) {
	k.mu.Lock()
	a := k.agents[pod.UID]
	k.mu.Unlock()
	if a != nil {
		a.evicted.Store(true)
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
	pod.Status.Phase, pod.Status.Reason, pod.Status.Message = corev1.PodFailed, "Evicted", msg
	pod.Status.Conditions = conditions(pod.Status.Conditions, metav1.Now(), corev1.ConditionFalse)
	k.updateStatus(ctx, pod)
}

// containerLog returns what the Pod's container printed.
func (k *kubelet) containerLog(uid types.UID) string {
	b, _ := os.ReadFile(filepath.Join(k.dir, string(uid), "container.log"))
	return string(b)
}
