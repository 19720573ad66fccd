package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
)

// An attached Kubernetes cluster (a compute of type kubernetes) is this
// provider built from the compute's record: its kubeconfig, its namespace,
// and Location, the compute's own location. Each node request carries the
// instance type of the job's Pods (provider.NodeRequest.InstanceType).

// computeSettings are the settings an attached cluster's compute gives,
// which the server's attached.kubernetes may not.
var computeSettings = []string{"kubeconfig", "context", "namespace", "node_selector", "tolerations", "low_priority"}

// Attached builds the provider of an attached cluster: settings are the
// server's attached.kubernetes, kubeconfig and namespace the compute's,
// location its own.
func Attached(settings map[string]any, kubeconfig []byte, namespace, location string, log *slog.Logger) (*Provider, error) {
	for _, k := range computeSettings {
		if _, ok := settings[k]; ok {
			return nil, fmt.Errorf("attached.kubernetes.%s in the server config: comes from each attached compute; remove it", k)
		}
	}
	cfg, err := parseSettings(settings)
	if err != nil {
		return nil, fmt.Errorf("attached.kubernetes in the server config: %w", err)
	}
	if cfg.Image == "" {
		return nil, errors.New("attached.kubernetes.image in the server config: required to attach Kubernetes clusters (a container image with the tide binary); ask the server's administrator to set it")
	}
	cfg.KubeconfigData, cfg.Namespace, cfg.Location, cfg.Logger = kubeconfig, namespace, location, log
	return New(cfg)
}

// attachedRESTConfig reads an attached cluster's kubeconfig. It comes
// from a user, not the operator, so it may not make the server read its
// files or run programs (exec and auth-provider plugins): credentials
// must be inline.
func attachedRESTConfig(data []byte, context string) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	for name, a := range kc.AuthInfos {
		switch {
		case a.Exec != nil, a.AuthProvider != nil:
			return nil, fmt.Errorf("kubeconfig: user %s authenticates through a plugin (exec or auth-provider), which would run on the tide server; give a token or client-certificate-data/client-key-data (for a service account: kubectl create token NAME)", name)
		case a.ClientCertificate != "", a.ClientKey != "", a.TokenFile != "":
			return nil, fmt.Errorf("kubeconfig: user %s names files (client-certificate, client-key or tokenFile), which the server cannot read; inline them (client-certificate-data, client-key-data, token; kubectl config view --raw --flatten --minify)", name)
		}
	}
	for name, c := range kc.Clusters {
		if c.CertificateAuthority != "" {
			return nil, fmt.Errorf("kubeconfig: cluster %s names a file (certificate-authority), which the server cannot read; inline it as certificate-authority-data (kubectl config view --raw --flatten --minify)", name)
		}
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*kc, context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

// instanceResources turns an instance type's requests and limits into the
// container's.
func instanceResources(r api.InstanceResources) (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	for _, part := range []struct {
		from map[string]string
		to   *corev1.ResourceList
	}{{r.Requests, &out.Requests}, {r.Limits, &out.Limits}} {
		for name, s := range part.from {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return out, fmt.Errorf("instance type resource %s: %q: %w", name, s, err)
			}
			if *part.to == nil {
				*part.to = corev1.ResourceList{}
			}
			(*part.to)[corev1.ResourceName(name)] = q
		}
	}
	return out, nil
}

// tolerationsOf converts an instance type's tolerations.
func tolerationsOf(ts []api.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range ts {
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.TolerationSeconds})
	}
	return out
}

// CheckError is a failed Check, with the field of the compute's file to
// look at.
type CheckError struct {
	Field string
	Err   error
}

func (e *CheckError) Error() string { return e.Err.Error() }
func (e *CheckError) Unwrap() error { return e.Err }

// checkName is the Pod and Secret name Check asks about: none exists.
const checkName = "tide-access-check"

// Check reaches the cluster and asks the API server, with dry runs that
// change nothing, whether this provider may do in its namespace what it
// does to nodes (list, create, patch, delete and evict Pods; create and
// delete Secrets) and whether a Pod of each instance type would be
// accepted. It returns the API server's URL. Failures are *CheckError
// carrying the API server's own message.
func (p *Provider) Check(ctx context.Context, instanceTypes map[string]api.InstanceType) (string, error) {
	ns := p.cfg.Namespace
	pods, secrets := p.client.CoreV1().Pods(ns), p.client.CoreV1().Secrets(ns)
	dry := []string{metav1.DryRunAll}
	access := func(what string, err error) error {
		switch {
		case err == nil, apierrors.IsNotFound(err) && !isNamespaceGone(err, ns):
			return nil
		case isNamespaceGone(err, ns):
			return &CheckError{Field: "namespace", Err: fmt.Errorf("namespace %s: %w; create it first (kubectl create namespace %s)", ns, err, ns)}
		}
		return &CheckError{Field: "kubeconfig_file", Err: fmt.Errorf("%s in namespace %s: %w", what, ns, err)}
	}
	if _, err := pods.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return "", access("listing Pods", err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: checkName, Namespace: ns}, StringData: map[string]string{secretKey: "x"}}
	if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{DryRun: dry}); err != nil {
		return "", access("creating a Secret", err)
	}
	for what, err := range map[string]error{
		"deleting a Secret":        secrets.Delete(ctx, checkName, metav1.DeleteOptions{DryRun: dry}),
		"deleting a Pod":           pods.Delete(ctx, checkName, metav1.DeleteOptions{DryRun: dry}),
		"evicting a Pod":           pods.EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: checkName, Namespace: ns}, DeleteOptions: &metav1.DeleteOptions{DryRun: dry}}),
		"removing a Pod finalizer": patchErr(pods.Patch(ctx, checkName, types.StrategicMergePatchType, []byte(`{}`), metav1.PatchOptions{DryRun: dry})),
	} {
		if err := access(what, err); err != nil {
			return "", err
		}
	}
	for name, it := range instanceTypes {
		req := provider.NodeRequest{ID: checkName, Workspace: "check", Compute: "check", Location: p.cfg.Location,
			Size: api.Size{Name: name, VCPUs: 1}, InstanceType: &it}
		pod, err := p.pod(req, api.Capacity{})
		if err != nil {
			return "", &CheckError{Field: "properties.instanceTypes." + name, Err: err}
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{DryRun: dry}); err != nil {
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return "", &CheckError{Field: "properties.instanceTypes." + name, Err: fmt.Errorf("a Pod of instance type %s: %w", name, err)}
			}
			return "", access("creating a Pod", err)
		}
	}
	return p.host, nil
}

func patchErr(_ *corev1.Pod, err error) error { return err }

// isNamespaceGone reports whether err says the namespace does not exist.
func isNamespaceGone(err error, ns string) bool {
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces" && d.Name == ns
}

// Detach deletes what is left of Location's Pods and their Secrets (a
// node forgotten while the cluster did not answer), so a detached cluster
// keeps nothing of tide's.
func (p *Provider) Detach(ctx context.Context) error {
	if p.cfg.Location == "" {
		return nil
	}
	sel := LabelManagedBy + "=tide," + labelLocation + "=" + labelValue(p.cfg.Location)
	pods, err := p.client.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("listing tide's Pods in namespace %s: %w", p.cfg.Namespace, err)
	}
	var errs []error
	for _, pod := range pods.Items {
		if err := p.release(ctx, pod.Name); err != nil {
			errs = append(errs, err)
		}
		if err := p.client.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: new(pod.UID)}}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Pod %s in namespace %s: %w", pod.Name, p.cfg.Namespace, err))
		}
		if err := p.client.CoreV1().Secrets(p.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Secret %s in namespace %s: %w", pod.Name, p.cfg.Namespace, err))
		}
		p.log.InfoContext(ctx, "deleted a Pod left at detach", slog.String("pod", p.cfg.Namespace+"/"+pod.Name))
	}
	return errors.Join(errs...)
}
