// Package servicebinding is what the Service Binding for Kubernetes
// specification (servicebinding.io) says where it differs from Kyma's
// binding usages: how a ServiceBinding's projection is named and made
// (internal/bindingusage's engine does the injecting), where a
// ClusterWorkloadResourceMapping says a workload keeps its pod template,
// which Secret a service names, and the conditions a ServiceBinding shows.
// It does no I/O.
package servicebinding

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	"github.com/quartermaster/qm/internal/bindingusage"
)

// Problem is why a ServiceBinding is not Ready: the Ready condition's
// reason and message; Service says the service is what is missing
// (ServiceAvailable is False too).
type Problem struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Service bool   `json:"service,omitempty"`
}

// DefaultPaths are those of a PodSpec-able workload (a Deployment, a
// StatefulSet, a Job...): the pod template at spec.template.
var DefaultPaths = bindingusage.Paths{Labels: "spec.template.metadata.labels", Containers: "spec.template.spec.containers"}

// UsageName is the name a ServiceBinding's projection goes by in the
// injection engine (its pod label, annotations and volume), apart from the
// usages' names.
func UsageName(binding string) string { return "sb-" + binding }

// Injection is what a ServiceBinding projects from a Secret with keys
// (digest hash): a volume at $SERVICE_BINDING_ROOT/<spec.name or name>,
// spec.env's variables and no others, into the containers spec.workload
// names (all when it names none). Type and provider, projected as files
// where the Secret has none, are spec.type and spec.provider, else what
// the service says (typ, provider).
func Injection(sb *sbv1.ServiceBinding, secret string, keys []string, hash, typ, provider string) bindingusage.Injection {
	env := make([]bindingusage.EnvVar, 0, len(sb.Spec.Env))
	for _, e := range sb.Spec.Env {
		env = append(env, bindingusage.EnvVar{Name: e.Name, Key: e.Key})
	}
	return bindingusage.Injection{
		Usage: UsageName(sb.Name), Binding: cmp.Or(sb.Spec.Name, sb.Name),
		Secret: secret, Keys: keys, Hash: hash,
		Env: env, Containers: sb.Spec.Workload.Containers, Volume: true,
		Type: cmp.Or(sb.Spec.Type, typ), Provider: cmp.Or(sb.Spec.Provider, provider),
	}
}

// ServiceSecret is the Secret a service names: the Secret itself, or a
// Provisioned Service's status.binding.name. Empty, with the reason, when
// the service names none yet.
func ServiceSecret(service *unstructured.Unstructured) (string, string) {
	if service.GetAPIVersion() == "v1" && service.GetKind() == "Secret" {
		return service.GetName(), ""
	}
	name, _, _ := unstructured.NestedString(service.Object, "status", "binding", "name")
	if name == "" {
		return "", fmt.Sprintf("%s %s has no status.binding.name yet: it is not a Provisioned Service, or it is not ready", service.GetKind(), service.GetName())
	}
	return name, ""
}

// MappingName is the name of the ClusterWorkloadResourceMapping of a
// resource: <plural>.<group>, or <plural> in the core group.
func MappingName(plural, group string) string {
	if group == "" {
		return plural
	}
	return plural + "." + group
}

// Paths are where a workload of version keeps its pod template, as the
// mapping says (nil: DefaultPaths). Quartermaster projects into one list of
// containers beside the pod's volumes and annotations, as a pod template
// has them; a mapping that asks for other shapes is refused with the
// reason. Init containers are not projected into.
func Paths(m *sbv1.ClusterWorkloadResourceMapping, version string) (bindingusage.Paths, error) {
	if m == nil {
		return DefaultPaths, nil
	}
	i := slices.IndexFunc(m.Spec.Versions, func(t sbv1.ClusterWorkloadResourceMappingTemplate) bool { return t.Version == version })
	if i < 0 {
		i = slices.IndexFunc(m.Spec.Versions, func(t sbv1.ClusterWorkloadResourceMappingTemplate) bool { return t.Version == "*" })
	}
	if i < 0 {
		return DefaultPaths, nil
	}
	t := m.Spec.Versions[i]
	paths := DefaultPaths
	if t.Annotations != "" {
		annotations, err := fixed(t.Annotations, false)
		if err != nil {
			return paths, fmt.Errorf("ClusterWorkloadResourceMapping %s: annotations: %w", m.Name, err)
		}
		if !strings.HasSuffix(annotations, ".annotations") {
			return paths, fmt.Errorf("ClusterWorkloadResourceMapping %s: annotations %s: Quartermaster needs the pod template's annotations, beside its labels", m.Name, t.Annotations)
		}
		paths.Labels = strings.TrimSuffix(annotations, "annotations") + "labels"
	}
	var containers []sbv1.ClusterWorkloadResourceMappingContainer
	for _, c := range t.Containers {
		if !strings.HasSuffix(c.Path, ".initContainers[*]") {
			containers = append(containers, c)
		}
	}
	switch len(containers) {
	case 0:
	case 1:
		c := containers[0]
		for field, want := range map[string]string{c.Name: ".name", c.Env: ".env", c.VolumeMounts: ".volumeMounts"} {
			if field != "" && field != want {
				return paths, fmt.Errorf("ClusterWorkloadResourceMapping %s: container field %s: Quartermaster supports a container's %s only", m.Name, field, want)
			}
		}
		path, err := fixed(c.Path, true)
		if err != nil {
			return paths, fmt.Errorf("ClusterWorkloadResourceMapping %s: containers: %w", m.Name, err)
		}
		paths.Containers = path
	default:
		return paths, fmt.Errorf("ClusterWorkloadResourceMapping %s: %d lists of containers: Quartermaster projects into one", m.Name, len(containers))
	}
	if t.Volumes != "" {
		volumes, err := fixed(t.Volumes, false)
		if err != nil {
			return paths, fmt.Errorf("ClusterWorkloadResourceMapping %s: volumes: %w", m.Name, err)
		}
		if volumes != paths.Volumes() {
			return paths, fmt.Errorf("ClusterWorkloadResourceMapping %s: volumes %s: Quartermaster needs them beside the containers, at .%s", m.Name, t.Volumes, paths.Volumes())
		}
	}
	return paths, nil
}

// fixed turns a fixed JSONPath (.spec.template.spec.containers[*]) into the
// engine's dotted path; list says it must end with [*].
func fixed(jsonPath string, list bool) (string, error) {
	p, ok := strings.CutPrefix(jsonPath, ".")
	if !ok {
		return "", fmt.Errorf("%s is not a fixed JSONPath (it starts with a dot)", jsonPath)
	}
	if list {
		if p, ok = strings.CutSuffix(p, "[*]"); !ok {
			return "", fmt.Errorf("%s does not end with [*]", jsonPath)
		}
	}
	if p == "" || strings.ContainsAny(p, "[]*@?()'\"") || slices.Contains(strings.Split(p, "."), "") {
		return "", fmt.Errorf("%s is not a fixed JSONPath of field names", jsonPath)
	}
	return p, nil
}

// Conditions are a ServiceBinding's Ready, ServiceAvailable and
// WorkloadProjected conditions at generation: all True when p is nil.
func Conditions(generation int64, p *Problem, secret string, workloads int) []metav1.Condition {
	cond := func(t string, ok bool, reason, message string) metav1.Condition {
		status := metav1.ConditionTrue
		if !ok {
			status = metav1.ConditionFalse
		}
		return metav1.Condition{Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
	}
	if p == nil {
		return []metav1.Condition{
			cond(sbv1.ConditionReady, true, "Projected", fmt.Sprintf("Secret %s is projected into %d workloads", secret, workloads)),
			cond(sbv1.ConditionServiceAvailable, true, "ResolvedBindingSecret", "the service names Secret "+secret),
			cond(sbv1.ConditionWorkloadProjected, true, "Projected", fmt.Sprintf("%d workloads carry the projection", workloads)),
		}
	}
	if p.Service {
		return []metav1.Condition{
			cond(sbv1.ConditionReady, false, p.Reason, p.Message),
			cond(sbv1.ConditionServiceAvailable, false, p.Reason, p.Message),
			cond(sbv1.ConditionWorkloadProjected, false, "ServiceNotAvailable", "nothing to project until the service names a Secret"),
		}
	}
	return []metav1.Condition{
		cond(sbv1.ConditionReady, false, p.Reason, p.Message),
		cond(sbv1.ConditionServiceAvailable, true, "ResolvedBindingSecret", "the service names Secret "+secret),
		cond(sbv1.ConditionWorkloadProjected, false, p.Reason, p.Message),
	}
}
