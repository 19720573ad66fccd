package kubernetes_test

// End-to-end test of attaching a Kubernetes cluster (type kubernetes):
// the test's real kube-apiserver attached with the CLI in Azure's
// kubernetesCompute shape with two instance types, a job on each (its
// Pods' requests, limits, node selector and tolerations checked as the API
// server stored them), a server restart mid-job, bad kubeconfigs refused
// with the API server's words, and a detach that leaves no Pod or Secret
// of tide's.

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/cli"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/server/servertest"
	"github.com/tideml/tide/internal/spec"
)

// k8sFile is an attached cluster's file in Azure's kubernetesCompute
// shape: small is placed by node selector, big by node selector and a
// toleration.
const k8sFile = `$schema: https://azuremlschemas.azureedge.net/latest/kubernetesCompute.schema.json
name: %s
type: kubernetes
namespace: %s
%s
properties:
  defaultInstanceType: small
  instanceTypes:
    small:
      nodeSelector:
        tide-test/pool: main
      resources:
        requests: {cpu: 500m, memory: 1Gi, nvidia.com/gpu: null}
        limits: {cpu: "1", memory: 1Gi, nvidia.com/gpu: null}
    big:
      nodeSelector:
        kubernetes.io/hostname: tide-test-node
      tolerations:
        - {key: dedicated, operator: Equal, value: ml, effect: NoSchedule}
      resources:
        requests: {cpu: "2", memory: 2Gi}
        limits: {cpu: "2", memory: 3Gi}
`

func TestAttachedCluster(t *testing.T) {
	c := requireCluster(t)
	ctx := t.Context()
	deleteAll(t, c.settings())
	exe, _ := os.Executable()
	opts := servertest.Options{DataDir: t.TempDir(),
		Location: config.Location{Name: "local", Provider: "local"},
		Configure: func(cfg *config.Server) {
			cfg.Attached.Kubernetes = map[string]any{
				"image": "tide.test/tide:test", "agent_command": []any{exe, "agent"},
				"env": map[string]any{"TIDE_TEST_AGENT": "1"}, "grace_period": "5s", "stop_timeout": "20s",
			}
			cfg.Attached.Timeout, cfg.Attached.DetachTimeout = 10*time.Second, 30*time.Second
		}}
	srv := servertest.Start(t, opts)
	defer func() { srv.Shutdown() }()
	defer func() {
		if t.Failed() {
			c.dump(t, srv, "cpu-cluster")
		}
	}()
	kc, err := os.ReadFile(c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	attach := func(name, ns string, kubeconfig []byte) (*api.Compute, error) {
		cp, err := spec.ParseCompute(name+".yml", fmt.Appendf(nil, k8sFile, name, ns, fmt.Sprintf("kubeconfig: %q", kubeconfig)), nil)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := srv.Client.PutCompute(ctx, "default", cp)
		return out, err
	}
	nothingStored := func(name string) {
		t.Helper()
		if _, err := srv.Client.Compute(ctx, "default", name); !api.IsNotFound(err) {
			t.Errorf("compute %s after a failed attach: err = %v, want not found", name, err)
		}
		if secs, _ := srv.Client.Secrets(ctx, "default"); len(secs) != 0 {
			t.Errorf("secrets after a failed attach: %+v", secs)
		}
	}

	// Bad input: a namespace the kubeconfig's account may not use, a
	// cluster nobody answers at, a namespace that does not exist (as the
	// cluster's admin), a kubeconfig that would run a program on the
	// server. Each is refused with the API server's (or client's) words,
	// naming the field, and nothing is stored.
	admin := writeConfig(t, c.url, c.ca, &clientcmdapi.AuthInfo{Token: adminToken})
	dead := writeConfig(t, "https://127.0.0.1:1", c.ca, &clientcmdapi.AuthInfo{Token: "x"})
	plugin := writeConfig(t, c.url, c.ca, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/true", APIVersion: "client.authentication.k8s.io/v1"}})
	for _, tt := range []struct {
		name, ns string
		kc       []byte
		want     string
	}{
		{"k8s-rbac", "other", kc, `kubeconfig_file: attaching k8s-rbac failed; nothing was stored: listing Pods in namespace other: pods is forbidden: User "system:serviceaccount:tide:tide" cannot list resource "pods" in API group "" in the namespace "other"`},
		{"k8s-dead", providerNS, dead, "kubeconfig_file: attaching k8s-dead failed; nothing was stored: listing Pods in namespace tide: Get \"https://127.0.0.1:1/api/v1/namespaces/tide/pods?limit=1\": dial tcp 127.0.0.1:1: connect: connection refused"},
		{"k8s-nons", "nope", admin, `namespace: attaching k8s-nons failed; nothing was stored: namespace nope: namespaces "nope" not found; create it first`},
		{"k8s-exec", providerNS, plugin, "kubeconfig_file: attaching k8s-exec failed; nothing was stored: kubeconfig: user u authenticates through a plugin (exec or auth-provider), which would run on the tide server"},
	} {
		_, err := attach(tt.name, tt.ns, tt.kc)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("attach %s: %v\nwant %q", tt.name, err, tt.want)
		}
		nothingStored(tt.name)
	}

	// Attach with the CLI, which reads kubeconfig_file (relative to the
	// YAML file): the kubeconfig goes into a secret no answer returns.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kc, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "k8s.yml")
	if err := os.WriteFile(file, fmt.Appendf(nil, k8sFile, "k8s", providerNS, "kubeconfig_file: kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := tide(t, srv, "compute", "attach", "-f", file); code != 0 || !strings.Contains(out, "kubeconfig_secret") || !strings.Contains(out, "instance_type big") {
		t.Fatalf("compute attach: exit %d\n%s", code, out)
	}
	k8s, err := srv.Client.Compute(ctx, "default", "k8s")
	if err != nil {
		t.Fatal(err)
	}
	if k8s.Type != api.ComputeTypeKubernetes || k8s.Kubernetes.Kubeconfig != "" || !k8s.Kubernetes.HasKubeconfig || k8s.Kubernetes.Server != c.url ||
		k8s.Kubernetes.KubeconfigSecret != "k8s-kubeconfig" || !slices.Equal(k8s.Kubernetes.InstanceTypeNames(), []string{"big", "small"}) {
		t.Errorf("attached compute: %+v %+v", k8s, k8s.Kubernetes)
	}
	if secs, _ := srv.Client.Secrets(ctx, "default"); len(secs) != 1 || secs[0].Name != "k8s-kubeconfig" || secs[0].Value != "" {
		t.Errorf("secrets: %+v; want k8s-kubeconfig without its value", secs)
	}
	if err := srv.Client.DeleteSecret(ctx, "default", "k8s-kubeconfig"); err == nil || !strings.Contains(err.Error(), "detach it first") {
		t.Errorf("deleting the kubeconfig's secret of an attached cluster: %v; want it refused", err)
	}
	if !servertest.Poll(ctx, 30*time.Second, func() bool {
		cp, err := srv.Client.Compute(ctx, "default", "k8s")
		return err == nil && cp.ProvisioningState == api.ProvisioningSucceeded
	}) {
		t.Error("the attached cluster did not reach Succeeded")
	}
	if out, _ := tide(t, srv, "compute", "list"); !regexp.MustCompile(`k8s +kubernetes +big,small +dedicated +`+regexp.QuoteMeta(c.url)).MatchString(out) || strings.Contains(out, "k8s.") {
		t.Errorf("compute list:\n%s", out)
	}

	// A job runs across a server restart: the new server builds the
	// cluster's provider again from the record and finds the Pod.
	srv = srv.RestartMidJob(opts, "k8s")

	// An instance type the cluster does not have is refused, listing its
	// types.
	j, err := spec.ParseJob("job.yml", []byte("command: echo\ncompute: azureml:k8s\nresources:\n  instance_type: huge\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.CreateJob(ctx, "default", j); err == nil || !strings.Contains(err.Error(), `resources.instance_type: "huge" is not an instance type of Kubernetes compute k8s; its types: big, small (default small)`) {
		t.Errorf("unknown instance type: %v", err)
	}

	// A job on each type (small by default; big as a 2-node gang): its
	// Pods carry the type's resources and placement.
	for _, tt := range []struct {
		file, itype string
		pods        int
		requests    corev1.ResourceList
		limits      corev1.ResourceList
		selector    map[string]string
		tolerations []corev1.Toleration
	}{
		{"command: echo on-$NODE_RANK; sleep 4\ncompute: k8s\n", "small", 1,
			corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("1Gi")},
			corev1.ResourceList{"cpu": resource.MustParse("1"), "memory": resource.MustParse("1Gi")},
			map[string]string{"tide-test/pool": "main"}, nil},
		{"command: echo on-$NODE_RANK; sleep 4\ncompute: k8s\nresources:\n  instance_type: big\n  instance_count: 2\n", "big", 2,
			corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("2Gi")},
			corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("3Gi")},
			map[string]string{"kubernetes.io/hostname": "tide-test-node"},
			[]corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "ml", Effect: "NoSchedule"}}},
	} {
		j := srv.Submit(tt.file)
		if sl := j.Serverless; sl == nil || sl.Kubernetes != "k8s" || sl.InstanceType != tt.itype || !strings.HasPrefix(j.Compute, "k8s.") {
			t.Fatalf("job on k8s: compute %s, %+v", j.Compute, j.Serverless)
		}
		j = srv.WaitJob(j.Name, 60*time.Second, servertest.Running)
		pods, err := c.admin.CoreV1().Pods(providerNS).List(ctx, metav1.ListOptions{LabelSelector: "tide/compute=" + j.Compute})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != tt.pods {
			t.Fatalf("%s job: %d Pods, want %d", tt.itype, len(pods.Items), tt.pods)
		}
		for _, p := range pods.Items {
			r := p.Spec.Containers[0].Resources
			// The API server adds its own (DefaultTolerationSeconds).
			p.Spec.Tolerations = slices.DeleteFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool { return strings.HasPrefix(t.Key, "node.kubernetes.io/") })
			if !sameResources(r.Requests, tt.requests) || !sameResources(r.Limits, tt.limits) ||
				!maps.Equal(p.Spec.NodeSelector, tt.selector) || !slices.Equal(p.Spec.Tolerations, tt.tolerations) {
				t.Errorf("%s Pod %s: requests %v limits %v selector %v tolerations %+v", tt.itype, p.Name, r.Requests, r.Limits, p.Spec.NodeSelector, p.Spec.Tolerations)
			}
		}
		if j = srv.WaitJob(j.Name, 60*time.Second, servertest.Terminal); j.Status != api.JobCompleted || len(j.Ranks) != tt.pods {
			t.Fatalf("%s job: %s %s ranks %+v", tt.itype, j.Status, j.Error, j.Ranks)
		}
		// Its Pods and their Secrets go with it.
		if !servertest.Poll(ctx, 60*time.Second, func() bool { return len(c.leftovers(t, providerNS)) == 0 }) {
			t.Errorf("after the %s job: left in namespace %s: %v", tt.itype, providerNS, c.leftovers(t, providerNS))
		}
	}

	// The cluster's jobs are listed as its own, not as serverless ones.
	if out, _ := tide(t, srv, "job", "list", "--compute", "k8s"); strings.Count(out, "Completed") != 3 {
		t.Errorf("job list --compute k8s: want the 3 completed jobs:\n%s", out)
	}
	if out, _ := tide(t, srv, "job", "list", "--compute", "serverless"); strings.Contains(out, "Completed") {
		t.Errorf("job list --compute serverless lists the cluster's jobs:\n%s", out)
	}

	// Detaching with a running job is refused, naming it; --force
	// cancels it, and the namespace keeps nothing of tide's.
	long := srv.Submit("command: sleep 300\ncompute: k8s\n")
	srv.WaitJob(long.Name, 60*time.Second, servertest.Running)
	if err := srv.Client.DetachCompute(ctx, "default", "k8s", false); err == nil || !strings.Contains(err.Error(), long.Name+" (Running)") {
		t.Errorf("detach with a running job: %v", err)
	}
	if err := srv.Client.DetachCompute(ctx, "default", "k8s", true); err != nil {
		t.Fatal(err)
	}
	if !servertest.Poll(ctx, 60*time.Second, func() bool {
		_, err := srv.Client.Compute(ctx, "default", "k8s")
		return api.IsNotFound(err)
	}) {
		t.Fatal("the detached cluster's compute did not go")
	}
	if j, _ := srv.Client.Job(ctx, "default", long.Name); j == nil || j.Status != api.JobCanceled {
		t.Errorf("the long job after detach --force: %+v", j)
	}
	if left := c.leftovers(t, providerNS); len(left) > 0 {
		t.Errorf("detach left in namespace %s: %v", providerNS, left)
	}
	if secs, _ := srv.Client.Secrets(ctx, "default"); len(secs) != 0 {
		t.Errorf("secrets after detach: %+v", secs)
	}
}

// tide runs the CLI against srv and returns its output and exit code.
func tide(t *testing.T, srv *servertest.Server, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	env := map[string]string{"TIDE_SERVER": "http://" + srv.Addr, "TIDE_TOKEN": srv.Token, "TIDE_CONFIG": filepath.Join(t.TempDir(), "none.json")}
	app := &cli.App{Stdout: &out, Stderr: &out, Getenv: func(k string) string { return env[k] }}
	code := app.Run(t.Context(), args)
	return out.String(), code
}

// writeConfig returns a kubeconfig for server with user.
func writeConfig(t *testing.T, server string, ca []byte, user *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos["u"] = user
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if w, ok := b[k]; !ok || q.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// TestAttachedClusterUnreachable detaches a cluster that stopped
// answering (its API server behind a proxy the test closes): the job is
// canceled, and after attached.detach_timeout its node is forgotten and
// the compute goes, leaving its Pod there (removed here by hand).
func TestAttachedClusterUnreachable(t *testing.T) {
	c := requireCluster(t)
	ctx := t.Context()
	deleteAll(t, c.settings())
	defer deleteAll(t, c.settings())
	exe, _ := os.Executable()
	srv := servertest.Start(t, servertest.Options{DataDir: t.TempDir(),
		Location: config.Location{Name: "local", Provider: "local"},
		Configure: func(cfg *config.Server) {
			cfg.Attached.Kubernetes = map[string]any{
				"image": "tide.test/tide:test", "agent_command": []any{exe, "agent"},
				"env": map[string]any{"TIDE_TEST_AGENT": "1"}, "grace_period": "2s", "stop_timeout": "5s",
			}
			cfg.Attached.Timeout, cfg.Attached.DetachTimeout = 5*time.Second, 5*time.Second
		}})
	defer srv.Shutdown()

	// The API server through a proxy the test can cut.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	cut := func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range conns {
			cn.Close()
		}
	}
	defer cut()
	target := strings.TrimPrefix(c.url, "https://")
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	kc, err := clientcmd.LoadFromFile(c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + ln.Addr().String()
	}
	proxied, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := spec.ParseCompute("k8s.yml", fmt.Appendf(nil, k8sFile, "k8s-gone", providerNS, fmt.Sprintf("kubeconfig: %q", proxied)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := srv.Client.PutCompute(ctx, "default", cp); err != nil {
		t.Fatal(err)
	}
	j := srv.Submit("command: sleep 300\ncompute: k8s-gone\n")
	j = srv.WaitJob(j.Name, 60*time.Second, servertest.Running)

	cut()
	if err := srv.Client.DetachCompute(ctx, "default", "k8s-gone", true); err != nil {
		t.Fatal(err)
	}
	if !servertest.Poll(ctx, 60*time.Second, func() bool {
		_, err := srv.Client.Compute(ctx, "default", "k8s-gone")
		return api.IsNotFound(err)
	}) {
		t.Fatal("the unreachable cluster's compute did not go")
	}
	if j, _ := srv.Client.Job(ctx, "default", j.Name); j == nil || j.Status != api.JobCanceled {
		t.Errorf("the job after detach --force: %+v", j)
	}
	if secs, _ := srv.Client.Secrets(ctx, "default"); len(secs) != 0 {
		t.Errorf("secrets after detach: %+v", secs)
	}
	// The Pod is still there: the detach took the unreachable path.
	if left := c.leftovers(t, providerNS); !slices.ContainsFunc(left, func(s string) bool { return strings.HasPrefix(s, "pod/tide-k8s-gone-") }) {
		t.Errorf("left in namespace %s: %v; want the job's Pod, which tide could not delete", providerNS, left)
	}
}
