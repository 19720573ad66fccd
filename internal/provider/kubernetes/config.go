package kubernetes

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tideml/tide/internal/provider"
)

// Config configures the kubernetes provider.
type Config struct {
	// Kubeconfig is the kubeconfig file to use. Default: the in-cluster
	// config when tide runs in a Pod, else $KUBECONFIG or ~/.kube/config.
	Kubeconfig string
	// KubeconfigData is the kubeconfig itself (an attached cluster's,
	// from its secret); it wins over Kubeconfig.
	KubeconfigData []byte
	// Location is the tide location whose Pods Detach removes (an
	// attached cluster's own location); "" for a configured location.
	Location string
	// Context is the kubeconfig context. Default: the current context.
	Context string
	// Namespace holds the location's Pods and Secrets. Default "tide".
	Namespace string
	// Image is the container image with the tide binary. Required.
	Image string
	// ImagePullPolicy is the container's pull policy (Always,
	// IfNotPresent, Never). Default: Kubernetes' default.
	ImagePullPolicy string
	// AgentCommand is the agent program and its leading arguments inside
	// the image; the agent flags are appended. Default: tide agent.
	AgentCommand []string
	// WorkDir is the node folder inside the Pod (an emptyDir volume).
	// Default /tide/node.
	WorkDir string
	// NodeSelector and Tolerations place dedicated nodes.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// LowPriority places low_priority nodes (for example on a spot
	// pool); its fields default to the dedicated ones when unset.
	LowPriority Placement
	// ServiceAccount runs the Pods. Default: the namespace's default,
	// with no API token mounted (the agent does not talk to Kubernetes).
	ServiceAccount string
	// ImagePullSecrets name Secrets for pulling Image.
	ImagePullSecrets []string
	// Env is added to the agent's environment.
	Env map[string]string
	// Labels and Annotations are added to every Pod (tide's own labels
	// win on a clash).
	Labels, Annotations map[string]string
	// GracePeriod is the Pods' terminationGracePeriodSeconds: how long
	// the agent has to stop its jobs on Delete or eviction. Default 30s.
	GracePeriod time.Duration
	// StopTimeout is how long Delete waits for a Pod to go away before it
	// returns anyway. Default GracePeriod + 30s.
	StopTimeout time.Duration
	// Logger receives the provider's logs. Default: discard.
	Logger *slog.Logger
}

// Placement is where a tier's Pods may run.
type Placement struct {
	// NodeSelector is nil when unset (inherit); an empty map clears it.
	NodeSelector map[string]string
	// Tolerations is nil when unset (inherit).
	Tolerations []corev1.Toleration
}

func (c *Config) fill() error {
	if c.Image == "" {
		return errors.New("image: required (a container image with the tide binary, e.g. registry.example.com/tide:1.0)")
	}
	if c.Namespace == "" {
		c.Namespace = "tide"
	}
	if len(c.AgentCommand) == 0 {
		c.AgentCommand = []string{"tide", "agent"}
	}
	if c.WorkDir == "" {
		c.WorkDir = "/tide/node"
	}
	if c.GracePeriod <= 0 {
		c.GracePeriod = 30 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = c.GracePeriod + 30*time.Second
	}
	if c.LowPriority.NodeSelector == nil {
		c.LowPriority.NodeSelector = c.NodeSelector
	}
	if c.LowPriority.Tolerations == nil {
		c.LowPriority.Tolerations = c.Tolerations
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

var settingsKeys = []string{"kubeconfig", "context", "namespace", "image", "image_pull_policy", "agent_command",
	"work_dir", "node_selector", "tolerations", "low_priority", "service_account", "image_pull_secrets",
	"env", "labels", "annotations", "grace_period", "stop_timeout"}

// parseSettings turns a location's settings into a Config.
func parseSettings(settings map[string]any) (Config, error) {
	var cfg Config
	for k, v := range settings {
		var err error
		switch k {
		case "kubeconfig":
			cfg.Kubeconfig, err = provider.SettingString(k, v)
		case "context":
			cfg.Context, err = provider.SettingString(k, v)
		case "namespace":
			cfg.Namespace, err = provider.SettingString(k, v)
		case "image":
			cfg.Image, err = provider.SettingString(k, v)
		case "image_pull_policy":
			cfg.ImagePullPolicy, err = provider.SettingString(k, v)
		case "agent_command":
			cfg.AgentCommand, err = provider.SettingStrings(k, v)
		case "work_dir":
			cfg.WorkDir, err = provider.SettingString(k, v)
		case "node_selector":
			cfg.NodeSelector, err = stringMap(k, v)
		case "tolerations":
			cfg.Tolerations, err = tolerations(k, v)
		case "low_priority":
			cfg.LowPriority, err = placement(k, v)
		case "service_account":
			cfg.ServiceAccount, err = provider.SettingString(k, v)
		case "image_pull_secrets":
			cfg.ImagePullSecrets, err = provider.SettingStrings(k, v)
		case "env":
			cfg.Env, err = stringMap(k, v)
		case "labels":
			cfg.Labels, err = stringMap(k, v)
		case "annotations":
			cfg.Annotations, err = stringMap(k, v)
		case "grace_period":
			cfg.GracePeriod, err = provider.SettingDuration(k, v)
		case "stop_timeout":
			cfg.StopTimeout, err = provider.SettingDuration(k, v)
		default:
			return cfg, fmt.Errorf("%s: unknown setting of the kubernetes provider; known: %s", k, strings.Join(settingsKeys, ", "))
		}
		if err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// stringMap reads a map of names to scalar values.
func stringMap(k string, v any) (map[string]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: must be a map of name: value (got %T)", k, v)
	}
	out := make(map[string]string, len(m))
	for name, val := range m {
		switch val.(type) {
		case map[string]any, []any, nil:
			return nil, fmt.Errorf("%s.%s: must be a string, number or boolean (got %v)", k, name, val)
		}
		out[name] = fmt.Sprint(val)
	}
	return out, nil
}

// placement reads low_priority: {node_selector, tolerations}.
func placement(k string, v any) (Placement, error) {
	var p Placement
	m, ok := v.(map[string]any)
	if !ok {
		return p, fmt.Errorf("%s: must be a map with node_selector and/or tolerations (got %T)", k, v)
	}
	for sub, val := range m {
		var err error
		switch sub {
		case "node_selector":
			p.NodeSelector, err = stringMap(k+"."+sub, val)
		case "tolerations":
			p.Tolerations, err = tolerations(k+"."+sub, val)
			if err == nil && p.Tolerations == nil {
				p.Tolerations = []corev1.Toleration{}
			}
		default:
			return p, fmt.Errorf("%s.%s: unknown setting; known: node_selector, tolerations", k, sub)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

var tolerationKeys = []string{"key", "operator", "value", "effect", "toleration_seconds"}

// tolerations reads a list of {key, operator, value, effect,
// toleration_seconds}. The values are left for the API server to check,
// so its own message reaches the user.
func tolerations(k string, v any) ([]corev1.Toleration, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: must be a list of {key, operator, value, effect, toleration_seconds} (got %T)", k, v)
	}
	var out []corev1.Toleration
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s[%d]: must be a map with keys %s (got %T)", k, i, strings.Join(tolerationKeys, ", "), e)
		}
		var t corev1.Toleration
		for _, f := range slices.Sorted(maps.Keys(m)) {
			name := fmt.Sprintf("%s[%d].%s", k, i, f)
			var err error
			switch f {
			case "key":
				t.Key, err = provider.SettingString(name, m[f])
			case "operator":
				var s string
				s, err = provider.SettingString(name, m[f])
				t.Operator = corev1.TolerationOperator(s)
			case "value":
				t.Value = fmt.Sprint(m[f])
			case "effect":
				var s string
				s, err = provider.SettingString(name, m[f])
				t.Effect = corev1.TaintEffect(s)
			case "toleration_seconds":
				var n int
				n, err = provider.SettingInt(name, m[f])
				secs := int64(n)
				t.TolerationSeconds = &secs
			default:
				return nil, fmt.Errorf("%s: unknown key; known: %s", name, strings.Join(tolerationKeys, ", "))
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, t)
	}
	return out, nil
}
