// Package kubernetes is the provider that gets nodes from a Kubernetes
// cluster: a node is a Pod (RestartPolicy Never) whose one container runs
// `tide agent`, with the compute's size as the container's requests and
// limits (vCPUs, memory, GPUs as nvidia.com/gpu), and the location's
// namespace, image, node selector and tolerations (separate ones for
// low_priority nodes, e.g. a spot pool).
//
// The node's token is kept in a Secret owned by the Pod and reaches the
// agent through env valueFrom.secretKeyRef, never the Pod spec or a
// command line. The Pods carry tide's labels and the node's id, workspace,
// compute and capacity as annotations, so a new provider (after a server
// restart) finds its nodes by listing the namespace; the cluster is the
// only state.
//
// The Pod's status is the node's: Pending is starting (with the
// scheduler's or the kubelet's reason), Running is running, Succeeded or
// Failed is exited; an eviction (a DisruptionTarget condition, status
// reason Evicted) or a deletion tide did not ask for is preempted.
package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/provider"
)

// Name is the provider's registry name.
const Name = "kubernetes"

// Labels and annotations tide puts on its Pods and Secrets.
const (
	// LabelManagedBy marks tide's objects; List selects on it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	labelNode      = "tide/node"
	labelCompute   = "tide/compute"
	labelWorkspace = "tide/workspace"
	labelLocation  = "tide/location"
	// annNode and friends hold the exact values (labels are limited to
	// 63 characters of a smaller alphabet).
	annNode      = "tide/node-id"
	annCompute   = "tide/compute"
	annWorkspace = "tide/workspace"
	annCapacity  = "tide/capacity"
	// containerName is the agent's container.
	containerName = "agent"
	// secretKey holds the token in the node's Secret.
	secretKey = "token"
	// gpuResource is how GPUs are requested (NVIDIA's device plugin).
	gpuResource corev1.ResourceName = "nvidia.com/gpu"
	// Finalizer is on every node Pod from its creation until tide deletes
	// it: a Pod deleted by someone else (a drain, a spot node's removal, a
	// user) stays, terminating, with its last status, until tide has seen
	// why it went (preempted) and deletes the node itself.
	Finalizer = "tideml.github.io/node"
	// podIPEnv carries the Pod's IP to the agent's --address, so the
	// other nodes of a gang reach node 0 there (MASTER_ADDR).
	podIPEnv = "TIDE_POD_IP"
)

// Provider is the kubernetes provider.
type Provider struct {
	cfg    Config
	log    *slog.Logger
	client clientset.Interface
	// host is the API server's URL.
	host string

	mu sync.Mutex
	// deleting holds the ids whose Pod this provider is deleting: a Pod
	// being deleted is preempted unless tide asked for it.
	deleting map[string]bool
}

var (
	_ provider.Provider  = (*Provider)(nil)
	_ provider.Preempter = (*Provider)(nil)
)

// New returns a kubernetes provider. It reads the kubeconfig but does not
// contact the cluster.
func New(cfg Config) (*Provider, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The controller checks every node each resync: allow bursts.
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "tide"
	cs, err := clientset.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &Provider{cfg: cfg, log: cfg.Logger.With(slog.String("provider", Name)), client: cs, host: rc.Host, deleting: map[string]bool{}}, nil
}

// restConfig finds the cluster: the kubeconfig setting, else the
// in-cluster config, else $KUBECONFIG or ~/.kube/config.
func restConfig(cfg Config) (*rest.Config, error) {
	if cfg.KubeconfigData != nil {
		return attachedRESTConfig(cfg.KubeconfigData, cfg.Context)
	}
	if cfg.Kubeconfig == "" && cfg.Context == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kubeconfig != "" {
		rules.ExplicitPath = cfg.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w (set kubeconfig and context in the location's settings, or run tide in the cluster)", err)
	}
	return rc, nil
}

// Factory builds a kubernetes provider from a location's settings (see
// Config; keys are kubeconfig, context, namespace, image,
// image_pull_policy, agent_command, work_dir, node_selector, tolerations,
// low_priority, service_account, image_pull_secrets, env, labels,
// annotations, grace_period, stop_timeout).
func Factory(name string, settings map[string]any, deps provider.Deps) (provider.Provider, error) {
	cfg, err := parseSettings(settings)
	if err != nil {
		return nil, err
	}
	cfg.Logger = deps.Logger
	return New(cfg)
}

// Name returns "kubernetes".
func (p *Provider) Name() string { return Name }

// PodName is the name of node id's Pod and Secret: "tide-" and the id in
// lower case with '_' and '.' as '-', and a hash of the id when that
// changed it (so two ids never share a Pod).
func PodName(id string) string {
	name := "tide-" + strings.NewReplacer("_", "-", ".", "-").Replace(strings.ToLower(id))
	if name != "tide-"+id || strings.HasSuffix(name, "-") {
		name += "-" + shortHash(id)
	}
	return name
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

// labelValue makes s a valid label value: itself when it is one, else its
// label-safe characters cut to fit, with a hash.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	safe := strings.Trim(string(b[:min(len(b), 50)]), "-_.")
	if safe == "" {
		return shortHash(s)
	}
	return safe + "-" + shortHash(s)
}

// pod is the Pod of req.
func (p *Provider) pod(req provider.NodeRequest, capacity api.Capacity) (*corev1.Pod, error) {
	name := PodName(req.ID)
	capJSON, err := json.Marshal(capacity)
	if err != nil {
		return nil, err
	}
	labels := maps.Clone(p.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, map[string]string{
		LabelManagedBy: "tide",
		labelNode:      labelValue(req.ID),
		labelCompute:   labelValue(req.Compute),
		labelWorkspace: labelValue(req.Workspace),
		labelLocation:  labelValue(req.Location),
	})
	anns := maps.Clone(p.cfg.Annotations)
	if anns == nil {
		anns = map[string]string{}
	}
	maps.Copy(anns, map[string]string{
		annNode: req.ID, annCompute: req.Compute, annWorkspace: req.Workspace, annCapacity: string(capJSON),
	})

	res := corev1.ResourceList{
		corev1.ResourceCPU: *resource.NewQuantity(int64(max(req.Size.VCPUs, 1)), resource.DecimalSI),
	}
	if mi := int64(req.Size.MemoryGB * 1024); mi > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(mi*1024*1024, resource.BinarySI)
	}
	if req.Size.GPUs > 0 {
		res[gpuResource] = *resource.NewQuantity(int64(req.Size.GPUs), resource.DecimalSI)
	}
	resources := corev1.ResourceRequirements{Requests: res, Limits: res}
	place := Placement{NodeSelector: p.cfg.NodeSelector, Tolerations: p.cfg.Tolerations}
	if req.Tier == api.TierLowPriority {
		place = p.cfg.LowPriority
	}
	if it := req.InstanceType; it != nil {
		// An attached cluster's instance type says it all.
		if resources, err = instanceResources(it.Resources); err != nil {
			return nil, err
		}
		place = Placement{NodeSelector: it.NodeSelector, Tolerations: tolerationsOf(it.Tolerations)}
	}

	flags := agent.Flags{
		ServerURLs: strings.Split(req.ServerURL, ","), CAFingerprint: req.CAFingerprint, RunAs: req.RunAs, CacheGB: req.CacheGB, NodeID: req.ID, Dir: p.cfg.WorkDir, Capacity: capacity,
		// Kubernetes expands $(VAR) in a container's command.
		Address: "$(" + podIPEnv + ")", Runtime: req.Runtime, Network: req.Network,
	}
	var env []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(p.cfg.Env)) {
		env = append(env, corev1.EnvVar{Name: k, Value: p.cfg.Env[k]})
	}
	// tide's own variables come last: of two with one name, the last wins.
	env = append(env, []corev1.EnvVar{
		{Name: agent.TokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: secretKey}}},
		{Name: podIPEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
	}...)
	grace := p.graceSeconds()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: labels, Annotations: anns, Finalizers: []string{Finalizer}},
		Spec: corev1.PodSpec{
			// A node that ends is replaced by tide, not restarted in place.
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			NodeSelector:                  place.NodeSelector,
			Tolerations:                   place.Tolerations,
			ServiceAccountName:            p.cfg.ServiceAccount,
			// The agent does not talk to Kubernetes: no API token in the
			// Pod unless a service account was chosen on purpose.
			AutomountServiceAccountToken: new(p.cfg.ServiceAccount != ""),
			EnableServiceLinks:           new(false),
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           p.cfg.Image,
				ImagePullPolicy: corev1.PullPolicy(p.cfg.ImagePullPolicy),
				Command:         append(append([]string(nil), p.cfg.AgentCommand...), flags.Args()...),
				Env:             env,
				WorkingDir:      p.cfg.WorkDir,
				Resources:       resources,
				VolumeMounts:    []corev1.VolumeMount{{Name: "node", MountPath: p.cfg.WorkDir}},
			}},
			Volumes: []corev1.Volume{{Name: "node", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	for _, s := range p.cfg.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return pod, nil
}

// graceSeconds is the Pods' termination grace period in whole seconds, at
// least 1 (0 would mean kill at once).
func (p *Provider) graceSeconds() int64 {
	return max(1, int64(p.cfg.GracePeriod/time.Second))
}

// Create creates the node's Pod, then its token's Secret owned by the
// Pod (so Kubernetes' garbage collector removes it with the Pod even if
// tide does not). A failure removes whatever was created.
func (p *Provider) Create(ctx context.Context, req provider.NodeRequest) (*provider.Node, error) {
	if !provider.ValidNodeID(req.ID) {
		return nil, fmt.Errorf("node id %q: must be letters, digits, '-', '_' or '.'", req.ID)
	}
	capacity := api.Capacity{VCPUs: req.Size.VCPUs, MemoryGB: req.Size.MemoryGB, GPUs: req.Size.GPUs,
		Note: "a Kubernetes Pod with the size's CPUs, memory and GPUs as requests and limits"}
	if req.InstanceType != nil {
		capacity.Note = "a Kubernetes Pod of instance type " + req.Size.Name
	}
	pod, err := p.pod(req, capacity)
	if err != nil {
		return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
	}
	ns := p.cfg.Namespace
	created, err := p.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, &provider.AlreadyExistsError{ID: req.ID}
	}
	if err != nil {
		return nil, fmt.Errorf("creating node %s: Pod %s in namespace %s: %w", req.ID, pod.Name, ns, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: ns, Labels: pod.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: created.Name, UID: created.UID}},
		},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{secretKey: req.Token},
	}
	if _, err := p.client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		// No Pod without its token: remove it now, whatever ctx says.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := p.client.CoreV1().Pods(ns).Delete(cleanup, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64(0)), Preconditions: &metav1.Preconditions{UID: &created.UID},
		}); derr != nil && !apierrors.IsNotFound(derr) {
			p.log.ErrorContext(ctx, "removing the Pod of a failed Create", slog.String("node", req.ID), slog.Any("err", derr))
		}
		if derr := p.release(cleanup, pod.Name); derr != nil {
			p.log.ErrorContext(ctx, "removing the Pod of a failed Create", slog.String("node", req.ID), slog.Any("err", derr))
		}
		return nil, fmt.Errorf("creating node %s: Secret %s in namespace %s: %w", req.ID, pod.Name, ns, err)
	}
	p.log.InfoContext(ctx, "created agent Pod", slog.String("node", req.ID), slog.String("pod", ns+"/"+pod.Name))
	n := p.view(created)
	n.State, n.Reason = provider.StateStarting, "Pod created"
	return n, nil
}

// view maps a Pod to the provider's node.
func (p *Provider) view(pod *corev1.Pod) *provider.Node {
	n := &provider.Node{
		ID: pod.Annotations[annNode], ProviderID: "kubernetes:" + pod.Namespace + "/" + pod.Name,
		Compute: pod.Annotations[annCompute], Workspace: pod.Annotations[annWorkspace],
		CreatedAt: pod.CreationTimestamp.UTC(), State: provider.StateRunning,
	}
	_ = json.Unmarshal([]byte(pod.Annotations[annCapacity]), &n.Capacity)
	n.State, n.Reason = p.state(pod, n.ID)
	return n
}

// state maps a Pod's status to a node state and its reason.
func (p *Provider) state(pod *corev1.Pod, id string) (string, string) {
	name := "Pod " + pod.Namespace + "/" + pod.Name
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return provider.StatePreempted, name + " was evicted: " + join(c.Reason, c.Message)
		}
	}
	switch pod.Status.Reason {
	case "Evicted", "Preempting", "Shutdown", "Terminated", "NodeShutdown":
		return provider.StatePreempted, name + " was evicted: " + join(pod.Status.Reason, pod.Status.Message)
	}
	if pod.DeletionTimestamp != nil {
		p.mu.Lock()
		ours := p.deleting[id]
		p.mu.Unlock()
		// tide releases its finalizer when it deletes the Pod.
		if ours || !slices.Contains(pod.Finalizers, Finalizer) {
			return provider.StateExited, name + " is being deleted by tide"
		}
		return provider.StatePreempted, name + " was deleted by someone other than tide (at " + pod.DeletionTimestamp.UTC().Format(time.RFC3339) + ")"
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return provider.StateRunning, ""
	case corev1.PodSucceeded, corev1.PodFailed:
		why := join(pod.Status.Reason, pod.Status.Message)
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				why = join(why, fmt.Sprintf("container %s exited with code %d", cs.Name, t.ExitCode)+paren(join(t.Reason, t.Message)))
			}
		}
		return provider.StateExited, name + " " + string(pod.Status.Phase) + paren(why)
	case corev1.PodUnknown:
		return provider.StateRunning, name + " is in state Unknown (its node may be unreachable)"
	}
	// Pending: not scheduled yet, or the kubelet is starting it.
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && pod.Spec.NodeName == "" {
			return provider.StateStarting, join(c.Reason, c.Message)
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return provider.StateStarting, join(w.Reason, w.Message)
		}
	}
	if pod.Spec.NodeName == "" {
		return provider.StateStarting, name + " is waiting to be scheduled"
	}
	return provider.StateStarting, name + " is starting on node " + pod.Spec.NodeName
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ": " + b
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// tide reports whether pod is one of tide's node Pods.
func tide(pod *corev1.Pod) bool {
	return pod.Labels[LabelManagedBy] == "tide" && pod.Annotations[annNode] != ""
}

// Get returns the node's state.
func (p *Provider) Get(ctx context.Context, id string) (*provider.Node, error) {
	if !provider.ValidNodeID(id) {
		return nil, &provider.NotFoundError{ID: id}
	}
	pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, PodName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &provider.NotFoundError{ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	if !tide(pod) || pod.Annotations[annNode] != id {
		return nil, &provider.NotFoundError{ID: id}
	}
	return p.view(pod), nil
}

// List returns the nodes of every tide Pod in the namespace.
func (p *Provider) List(ctx context.Context) ([]*provider.Node, error) {
	pods, err := p.client.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=tide"})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: Pods in namespace %s: %w", p.cfg.Namespace, err)
	}
	var out []*provider.Node
	for i := range pods.Items {
		if pod := &pods.Items[i]; tide(pod) {
			out = append(out, p.view(pod))
		}
	}
	return out, nil
}

// Delete deletes the node's Pod (the agent gets SIGTERM and the grace
// period) and its Secret, then waits up to StopTimeout for the Pod to go.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if !provider.ValidNodeID(id) {
		return &provider.NotFoundError{ID: id}
	}
	name, ns := PodName(id), p.cfg.Namespace
	p.mu.Lock()
	p.deleting[id] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.deleting, id)
		p.mu.Unlock()
	}()
	grace := p.graceSeconds()
	perr := p.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if perr != nil && !apierrors.IsNotFound(perr) {
		return fmt.Errorf("deleting node %s: Pod %s in namespace %s: %w", id, name, ns, perr)
	}
	if err := p.client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: Secret %s in namespace %s: %w", id, name, ns, err)
	}
	if apierrors.IsNotFound(perr) {
		return &provider.NotFoundError{ID: id}
	}
	if err := p.release(ctx, name); err != nil {
		return fmt.Errorf("deleting node %s: %w", id, err)
	}
	p.log.InfoContext(ctx, "deleted agent Pod", slog.String("node", id), slog.String("pod", ns+"/"+name))
	if err := p.waitGone(ctx, name); err != nil {
		p.log.WarnContext(ctx, "Pod still terminating; leaving it to Kubernetes", slog.String("node", id), slog.String("pod", ns+"/"+name), slog.Any("err", err))
	}
	return nil
}

// release removes tide's finalizer from the Pod, so that its deletion
// can complete.
func (p *Provider) release(ctx context.Context, name string) error {
	patch := []byte(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["` + Finalizer + `"]}}`)
	_, err := p.client.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s from Pod %s in namespace %s: %w", Finalizer, name, p.cfg.Namespace, err)
	}
	return nil
}

// waitGone polls until the Pod no longer exists.
func (p *Provider) waitGone(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StopTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Preempt evicts the node's Pod through the Eviction API, as the cluster
// would drain its Kubernetes node: PodDisruptionBudgets are honoured, the
// agent gets SIGTERM and the grace period, and the node reads as
// preempted.
func (p *Provider) Preempt(ctx context.Context, id string) error {
	if !provider.ValidNodeID(id) {
		return &provider.NotFoundError{ID: id}
	}
	name := PodName(id)
	err := p.client.CoreV1().Pods(p.cfg.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace},
	})
	if apierrors.IsNotFound(err) {
		return &provider.NotFoundError{ID: id}
	}
	if err != nil {
		return fmt.Errorf("preempting node %s: evicting Pod %s in namespace %s: %w", id, name, p.cfg.Namespace, err)
	}
	return nil
}
