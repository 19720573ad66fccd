package kubernetes_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/kubernetes"
	"github.com/tideml/tide/internal/provider/providertest"
	"github.com/tideml/tide/internal/server/servertest"
)

// providerNS is the namespace of deploy/kubernetes/rbac.yaml.
const providerNS = "tide"

// TestMain starts the test's control plane and makes the test binary
// double as the agent: the test kubelet runs the Pods' command, this
// binary with TIDE_TEST_AGENT=1 and the agent's real flags.
func TestMain(m *testing.M) { providertest.AgentMain(m, setupCluster) }

var (
	testCluster    *cluster
	testClusterErr error
)

func setupCluster() func() {
	testCluster, testClusterErr = startCluster()
	if testClusterErr != nil {
		return func() {}
	}
	return testCluster.stop
}

// requireCluster returns the cluster, or skips the test (fails it under
// CI) when the machine cannot run one.
func requireCluster(t *testing.T) *cluster {
	t.Helper()
	if testCluster != nil {
		return testCluster
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("kubernetes control plane: %v", testClusterErr)
	}
	t.Skipf("kubernetes control plane (kube-apiserver %s + etcd, built by testdata/kube-binaries.sh): %v", kubeVersion, testClusterErr)
	return nil
}

func (c *cluster) settings() map[string]any {
	exe, _ := os.Executable()
	return map[string]any{
		"kubeconfig": c.kubeconfig, "namespace": providerNS,
		// No kubelet pulls it: the test kubelet runs agent_command.
		"image":         "tide.test/tide:test",
		"agent_command": []any{exe, "agent"},
		"node_selector": map[string]any{poolLabel: "main"},
		"env":           map[string]any{"TIDE_TEST_AGENT": "1"},
		"labels":        map[string]any{"team": "ml"},
		"grace_period":  "5s", "stop_timeout": "20s",
	}
}

func open(t *testing.T, settings map[string]any) provider.Provider {
	t.Helper()
	return providertest.Open(t, kubernetes.Factory, settings)
}

// deleteAll deletes every node left, so no Pod outlives the test.
func deleteAll(t *testing.T, settings map[string]any) {
	providertest.DeleteAll(t, func() provider.Provider { return open(t, settings) })
}

func TestConformance(t *testing.T) {
	c := requireCluster(t)
	providertest.Run(t, func(t *testing.T) func() provider.Provider {
		settings := c.settings()
		deleteAll(t, settings)
		return func() provider.Provider { return open(t, settings) }
	})
}

// waitNode polls Get until cond holds.
func waitNode(t *testing.T, p provider.Provider, id string, what string, cond func(*provider.Node) bool) *provider.Node {
	t.Helper()
	var n *provider.Node
	var err error
	if !servertest.Poll(t.Context(), 30*time.Second, func() bool {
		n, err = p.Get(t.Context(), id)
		return err == nil && cond(n)
	}) {
		t.Fatalf("node %s: timed out waiting for %s (last: %+v, %v)", id, what, n, err)
	}
	return n
}

// leftovers lists the Pods and Secrets of namespace ns.
func (c *cluster) leftovers(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	pods, err := c.admin.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out = append(out, "pod/"+p.Name)
	}
	secrets, err := c.admin.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		out = append(out, "secret/"+s.Name)
	}
	return out
}

// TestPodSpec checks the Pod the provider makes, as the API server
// stored it: the size as requests and limits, the placement of each
// tier, tide's labels, and the token only in a Secret owned by the Pod.
func TestPodSpec(t *testing.T) {
	c := requireCluster(t)
	ctx := t.Context()
	settings := c.settings()
	settings["tolerations"] = []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}}
	settings["low_priority"] = map[string]any{
		"node_selector": map[string]any{"pool": "spot"},
		"tolerations":   []any{map[string]any{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}},
	}
	deleteAll(t, settings)
	p := open(t, settings)

	req := providertest.Request("spec-gpu")
	req.Size = api.Size{Name: "Standard_NC6", VCPUs: 6, MemoryGB: 56, GPUs: 1}
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	pod, err := c.admin.CoreV1().Pods(providerNS).Get(ctx, kubernetes.PodName(req.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := pod.Spec.Containers[0]
	for name, want := range map[corev1.ResourceName]string{"cpu": "6", "memory": "56Gi", "nvidia.com/gpu": "1"} {
		if q := ctr.Resources.Requests[name]; q.String() != want {
			t.Errorf("requests[%s] = %s; want %s", name, q.String(), want)
		}
		if q := ctr.Resources.Limits[name]; q.String() != want {
			t.Errorf("limits[%s] = %s; want %s", name, q.String(), want)
		}
	}
	if !slices.Contains(pod.Finalizers, kubernetes.Finalizer) {
		t.Errorf("Pod finalizers %v; want %s", pod.Finalizers, kubernetes.Finalizer)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.NodeSelector[poolLabel] != "main" ||
		len(pod.Spec.Tolerations) == 0 || pod.Spec.Tolerations[0].Key != "dedicated" {
		t.Errorf("dedicated Pod: restart %s, node selector %v, tolerations %+v", pod.Spec.RestartPolicy, pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	for k, v := range map[string]string{"app.kubernetes.io/managed-by": "tide", "tide/node": req.ID, "tide/compute": req.Compute,
		"tide/workspace": req.Workspace, "tide/location": req.Location, "team": "ml"} {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q; want %q", k, pod.Labels[k], v)
		}
	}
	// The token is in the Secret, owned by the Pod, and nowhere in the Pod.
	b, _ := json.Marshal(pod)
	if strings.Contains(string(b), req.Token) {
		t.Errorf("the Pod holds the node's token in clear: %s", b)
	}
	sec, err := c.admin.CoreV1().Secrets(providerNS).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["token"]) != req.Token || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != pod.UID {
		t.Errorf("Secret: data %q, owners %+v; want the token, owned by Pod %s", sec.Data["token"], sec.OwnerReferences, pod.UID)
	}
	var tokenRef bool
	for _, e := range ctr.Env {
		if e.Name == agent.TokenEnv && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == sec.Name {
			tokenRef = true
		}
	}
	if !tokenRef {
		t.Errorf("no %s from the Secret in env %+v", agent.TokenEnv, ctr.Env)
	}
	// The test kubelet ran the agent with that env: it is running.
	waitNode(t, p, req.ID, "running", func(n *provider.Node) bool { return n.State == provider.StateRunning })

	// low_priority gets its own placement (and waits: no spot node here).
	low := providertest.Request("spec-low")
	low.Tier = api.TierLowPriority
	if _, err := p.Create(ctx, low); err != nil {
		t.Fatal(err)
	}
	pod, err = c.admin.CoreV1().Pods(providerNS).Get(ctx, kubernetes.PodName(low.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (The DefaultTolerationSeconds admission plugin adds its own after ours.)
	if pod.Spec.NodeSelector["pool"] != "spot" || len(pod.Spec.Tolerations) == 0 || pod.Spec.Tolerations[0].Key != "spot" ||
		slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "dedicated" }) {
		t.Errorf("low_priority Pod: node selector %v, tolerations %+v; want the low_priority ones", pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	// An unschedulable Pod is a starting node with the scheduler's reason.
	waitNode(t, p, low.ID, "the scheduler's reason", func(n *provider.Node) bool {
		return n.State == provider.StateStarting && n.Reason == "Unschedulable: "+unschedulable
	})
}

// TestStates checks how the cluster's view reaches tide: an evicted Pod
// and a Pod deleted by someone else are preempted nodes, an agent that
// exits an exited one, each with the reason.
func TestStates(t *testing.T) {
	c := requireCluster(t)
	ctx := t.Context()
	settings := c.settings()
	deleteAll(t, settings)
	p := open(t, settings)
	for _, id := range []string{"st-evict", "st-del", "st-exit", "st-preempt", "st-pressure"} {
		if _, err := p.Create(ctx, providertest.Request(id)); err != nil {
			t.Fatal(err)
		}
		waitNode(t, p, id, "running", func(n *provider.Node) bool { return n.State == provider.StateRunning })
	}

	// A Pod whose Secret is gone (a server that stopped between the two)
	// waits with the kubelet's reason. The Node is cordoned meanwhile, so
	// the Secret is gone before the kubelet sees the Pod.
	c.kubelet.cordoned.Store(true)
	if _, err := p.Create(ctx, providertest.Request("st-nosecret")); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.CoreV1().Secrets(providerNS).Delete(ctx, kubernetes.PodName("st-nosecret"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, p, "st-nosecret", "the scheduler's reason", func(n *provider.Node) bool {
		return n.State == provider.StateStarting && n.Reason == "Unschedulable: "+cordonedMsg
	})
	c.kubelet.cordoned.Store(false)
	waitNode(t, p, "st-nosecret", "the kubelet's reason", func(n *provider.Node) bool {
		return n.State == provider.StateStarting && n.Reason == `CreateContainerConfigError: secret "tide-st-nosecret" not found`
	})

	// Eviction through the Eviction API, as a node drain does.
	if err := c.admin.CoreV1().Pods(providerNS).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: kubernetes.PodName("st-evict"), Namespace: providerNS},
	}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, p, "st-evict", "preempted by the eviction", func(n *provider.Node) bool {
		return n.State == provider.StatePreempted && strings.Contains(n.Reason, "was evicted: EvictionByEvictionAPI")
	})
	// The provider's own Preempt is the same eviction.
	if err := p.(provider.Preempter).Preempt(ctx, "st-preempt"); err != nil {
		t.Fatal(err)
	}
	waitNode(t, p, "st-preempt", "preempted", func(n *provider.Node) bool {
		return n.State == provider.StatePreempted && strings.Contains(n.Reason, "EvictionByEvictionAPI")
	})
	// A deletion tide did not ask for: the kubelet stops the agent and
	// removes the Pod, which tide's finalizer keeps until tide saw it.
	if err := c.admin.CoreV1().Pods(providerNS).Delete(ctx, kubernetes.PodName("st-del"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, p, "st-del", "the kubelet's removal", func(n *provider.Node) bool {
		pod, err := c.admin.CoreV1().Pods(providerNS).Get(ctx, kubernetes.PodName("st-del"), metav1.GetOptions{})
		return err == nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 &&
			n.State == provider.StatePreempted && strings.Contains(n.Reason, "deleted by someone other than tide")
	})

	// The agent exits with an error: the node exits with the Pod's reason.
	pod, err := c.admin.CoreV1().Pods(providerNS).Get(ctx, kubernetes.PodName("st-exit"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.kubelet.mu.Lock()
	a := c.kubelet.agents[pod.UID]
	c.kubelet.mu.Unlock()
	if a == nil {
		t.Fatal("the kubelet runs no agent for st-exit")
	}
	_ = a.cmd.Process.Kill()
	waitNode(t, p, "st-exit", "exited", func(n *provider.Node) bool {
		return n.State == provider.StateExited && strings.Contains(n.Reason, "Failed (container agent exited with code -1 (Error))")
	})
	// The kubelet evicts the Pod for node pressure: status reason Evicted.
	pod, err = c.admin.CoreV1().Pods(providerNS).Get(ctx, kubernetes.PodName("st-pressure"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.kubelet.pressureEvict(ctx, pod, "The node was low on resource: memory.")
	waitNode(t, p, "st-pressure", "preempted by the kubelet's eviction", func(n *provider.Node) bool {
		return n.State == provider.StatePreempted && strings.HasSuffix(n.Reason, "was evicted: Evicted: The node was low on resource: memory.")
	})
	for _, id := range []string{"st-evict", "st-preempt", "st-del", "st-exit", "st-pressure", "st-nosecret"} {
		if err := p.Delete(ctx, id); err != nil && !provider.IsNotFound(err) {
			t.Errorf("Delete %s: %v", id, err)
		}
	}
}

// TestBadInput checks that what the API server refuses reaches the user
// as a provisioning error with its own message, and leaves nothing.
func TestBadInput(t *testing.T) {
	c := requireCluster(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		id    string
		edit  func(map[string]any)
		ns    string
		setup func(t *testing.T, id string)
		want  string
	}{
		{"namespace tide may not write to", "bad-0", func(s map[string]any) { s["namespace"] = "other" }, "other", nil,
			`pods is forbidden: User "system:serviceaccount:tide:tide" cannot create resource "pods" in API group "" in the namespace "other"`},
		{"invalid toleration operator", "bad-1", func(s map[string]any) {
			s["tolerations"] = []any{map[string]any{"key": "a", "operator": "Sometimes"}}
		}, providerNS, nil, `spec.tolerations[0].operator: Unsupported value: "Sometimes": supported values: "Equal", "Exists"`},
		{"invalid node selector", "bad-2", func(s map[string]any) { s["node_selector"] = map[string]any{"bad key!": "x"} }, providerNS, nil,
			`spec.nodeSelector: Invalid value: "bad key!"`},
		{"Secret creation fails", "bad-3", nil, providerNS, func(t *testing.T, id string) {
			// A Secret of that name already exists: the Pod must go.
			if _, err := c.admin.CoreV1().Secrets(providerNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kubernetes.PodName(id)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.admin.CoreV1().Secrets(providerNS).Delete(context.Background(), kubernetes.PodName(id), metav1.DeleteOptions{})
			})
		}, `secrets "tide-bad-3" already exists`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settings := c.settings()
			if tc.edit != nil {
				tc.edit(settings)
			}
			id := tc.id
			if tc.setup != nil {
				tc.setup(t, id)
			}
			before := c.leftovers(t, tc.ns)
			_, err := open(t, settings).Create(ctx, providertest.Request(id))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "creating node "+id) {
				t.Fatalf("Create: err = %v; want the API server's %q", err, tc.want)
			}
			t.Logf("provisioning error: %v", err)
			if after := c.leftovers(t, tc.ns); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Errorf("a failed Create left objects: before %v, after %v", before, after)
			}
		})
	}
}

// startServer starts a server whose location k8s is the test cluster,
// with no Pods left from earlier tests.
func (c *cluster) startServer(t *testing.T) (*servertest.Server, servertest.Options) {
	settings := c.settings()
	deleteAll(t, settings)
	opts := servertest.Options{DataDir: t.TempDir(), Location: config.Location{Name: "k8s", Provider: "kubernetes", Settings: settings}}
	return servertest.Start(t, opts), opts
}

// TestEndToEnd runs jobs through a real server on agents in Pods: a
// node waiting for the scheduler, a 2-node gang, a server restart
// mid-job, and an eviction that preempts the node and retries the job.
func TestEndToEnd(t *testing.T) {
	c := requireCluster(t)
	srv, opts := c.startServer(t)
	defer func() { srv.Shutdown() }()
	defer func() {
		if t.Failed() {
			c.dump(t, srv, "cpu-cluster")
		}
	}()
	srv.PutCompute("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 2\nidle_time_before_scale_down: 600\n")

	// While the Node is cordoned, the nodes wait in preparing with the
	// scheduler's reason.
	c.kubelet.cordoned.Store(true)
	defer c.kubelet.cordoned.Store(false)
	j := srv.Submit("command: echo rank=$NODE_RANK of $AZUREML_NODE_COUNT\ncompute: cpu-cluster\nresources:\n  instance_count: 2\n")
	var nodes []api.Node
	if !servertest.Poll(t.Context(), 30*time.Second, func() bool {
		nodes, _ = srv.Client.Nodes(t.Context(), "default", "cpu-cluster")
		for _, n := range nodes {
			if n.State == api.NodePreparing && n.Error == "Unschedulable: "+cordonedMsg {
				return true
			}
		}
		return false
	}) {
		t.Errorf("no preparing node shows the scheduler's reason: %+v", nodes)
	}
	c.kubelet.cordoned.Store(false)
	j = srv.WaitJob(j.Name, 90*time.Second, servertest.Terminal)
	if j.Status != api.JobCompleted || len(j.Ranks) != 2 || j.Ranks[0].Node == j.Ranks[1].Node {
		t.Fatalf("gang job: %s %s ranks %+v", j.Status, j.Error, j.Ranks)
	}

	srv = srv.RestartMidJob(opts, "cpu-cluster")

	// Evicting the job's Pod preempts its node (the kubelet stops the
	// agent at once; tide's finalizer keeps the Pod and its reason until
	// the controller saw them); the job runs again.
	j = srv.Submit("command: sleep 120\ncompute: cpu-cluster\n")
	j = srv.WaitJob(j.Name, 30*time.Second, servertest.Running)
	first := j.Attempt
	node := j.Ranks[0].Node
	if err := c.admin.CoreV1().Pods(providerNS).EvictV1(t.Context(), &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: kubernetes.PodName(node), Namespace: providerNS},
	}); err != nil {
		t.Fatal(err)
	}
	if !servertest.Poll(t.Context(), 30*time.Second, func() bool {
		nodes, _ = srv.Client.Nodes(t.Context(), "default", "cpu-cluster")
		for _, n := range nodes {
			if n.ID == node && n.State == api.NodePreempted && strings.Contains(n.Error, "EvictionByEvictionAPI") {
				return true
			}
		}
		// The preempted node may already be replaced (a loaded machine
		// polls less often than the controller turns): its event says it.
		evs, _ := srv.Client.ComputeEvents(t.Context(), "default", "cpu-cluster")
		for _, e := range evs {
			if e.Kind == "NodePreempted" && strings.Contains(e.Message, node) && strings.Contains(e.Message, "EvictionByEvictionAPI") {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("node %s not preempted after its Pod's eviction: %+v", node, nodes)
	}
	// The job runs again, on another node.
	j = srv.WaitJob(j.Name, 60*time.Second, func(j *api.Job) bool {
		return j.Attempt > first && j.Status == api.JobRunning && j.Ranks[0].Node != node || servertest.Terminal(j)
	})
	if evs, err := srv.Client.JobEvents(t.Context(), "default", j.Name); err == nil {
		for _, e := range evs {
			t.Logf("%s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.Message)
		}
	}
	if j.Attempt <= first || j.Status != api.JobRunning {
		t.Errorf("job after its node's eviction: %s attempt %d (first %d) %q; want it running again on another node", j.Status, j.Attempt, first, j.Error)
	}
	_, _ = srv.Client.CancelJob(t.Context(), "default", j.Name)
	srv.WaitJob(j.Name, 60*time.Second, servertest.Terminal)
	srv.DeleteCompute("cpu-cluster", 60*time.Second)
}

func TestSettings(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"image": "tide:1", "kubeconfig": writeKubeconfig(t)}
	}
	for _, tc := range []struct {
		edit func(map[string]any)
		want string // "" for no error
	}{
		{func(s map[string]any) {
			s["namespace"], s["node_selector"], s["env"] = "ml", map[string]any{"pool": "a"}, map[string]any{"A": 1}
			s["low_priority"] = map[string]any{"node_selector": map[string]any{"pool": "spot"}, "tolerations": []any{}}
			s["image_pull_secrets"], s["service_account"], s["grace_period"] = []any{"regcred"}, "tide-agent", "10s"
		}, ""},
		{func(s map[string]any) { delete(s, "image") }, "image: required"},
		{func(s map[string]any) { s["imagee"] = "x" }, "imagee: unknown setting of the kubernetes provider"},
		{func(s map[string]any) { s["node_selector"] = "pool=a" }, "node_selector: must be a map"},
		{func(s map[string]any) { s["tolerations"] = []any{map[string]any{"key": "a", "oprator": "Exists"}} }, "tolerations[0].oprator: unknown key"},
		{func(s map[string]any) { s["low_priority"] = map[string]any{"partition": "x"} }, "low_priority.partition: unknown setting"},
		{func(s map[string]any) { s["grace_period"] = "soon" }, "grace_period: must be a positive duration"},
		{func(s map[string]any) { s["kubeconfig"] = "/nonexistent/kubeconfig" }, "kubeconfig:"},
		{func(s map[string]any) { s["context"] = "nope" }, `context "nope" does not exist`},
	} {
		s := base()
		tc.edit(s)
		_, err := kubernetes.Factory("kubernetes", s, provider.Deps{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("settings %v: err = %v; want %q", s, err, tc.want)
		}
	}
}

// writeKubeconfig writes a kubeconfig naming an unreachable cluster: New
// does not contact it.
func writeKubeconfig(t *testing.T) string {
	path := t.TempDir() + "/kubeconfig"
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPodName(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"cpu-cluster-0a1b2c3d", "tide-cpu-cluster-0a1b2c3d"},
		{"GPU_cluster-1", "tide-gpu-cluster-1-"},
		{"a.b", "tide-a-b-"},
	} {
		if got := kubernetes.PodName(tc.id); !strings.HasPrefix(got, tc.want) || (tc.want[len(tc.want)-1] != '-') != (got == tc.want) {
			t.Errorf("PodName(%q) = %q; want %q...", tc.id, got, tc.want)
		}
	}
	if kubernetes.PodName("A") == kubernetes.PodName("a") {
		t.Error("ids differing in case share a Pod name")
	}
}

// dump logs the compute's events, its nodes and the agents' output, to
// explain a failure.
func (c *cluster) dump(t *testing.T, srv *servertest.Server, compute string) {
	ctx := context.Background()
	if evs, err := srv.Client.ComputeEvents(ctx, "default", compute); err == nil {
		for _, e := range evs {
			t.Logf("event %s: %s", e.Kind, e.Message)
		}
	}
	if nodes, err := srv.Client.Nodes(ctx, "default", compute); err == nil {
		for _, n := range nodes {
			t.Logf("node %s: %s %s", n.ID, n.State, n.Error)
		}
	}
	pods, _ := c.admin.CoreV1().Pods(providerNS).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		t.Logf("pod %s: %s on %q; agent output:\n%s", p.Name, p.Status.Phase, p.Spec.NodeName, tail(c.kubelet.containerLog(p.UID), 2000))
	}
}

// TestProvisioningError checks that a namespace tide may not write to
// shows on the compute, through a real server, as a provisioning error
// with the API server's message, and that nothing is left in it.
func TestProvisioningError(t *testing.T) {
	c := requireCluster(t)
	settings := c.settings()
	settings["namespace"] = "other"
	srv := servertest.Start(t, servertest.Options{DataDir: t.TempDir(), Location: config.Location{Name: "k8s", Provider: "kubernetes", Settings: settings}})
	defer srv.Shutdown()
	srv.PutCompute("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 1\nmax_instances: 1\n")
	const want = `pods is forbidden: User "system:serviceaccount:tide:tide" cannot create resource "pods" in API group "" in the namespace "other"`
	var cp *api.Compute
	if !servertest.Poll(t.Context(), 30*time.Second, func() bool {
		cp, _ = srv.Client.Compute(t.Context(), "default", "cpu-cluster")
		return cp != nil && slices.ContainsFunc(cp.Errors, func(e api.ErrorDetail) bool { return strings.Contains(e.Message, want) })
	}) {
		t.Fatalf("compute errors %+v; want the API server's %q", cp, want)
	}
	if left := c.leftovers(t, "other"); len(left) > 0 {
		t.Errorf("failed Creates left %v in namespace other", left)
	}
	srv.DeleteCompute("cpu-cluster", 30*time.Second)
}
