package plan

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/parameters"
	"github.com/quartermaster/qm/internal/registry"
)

// Subject is what an operation's templates are rendered for.
type Subject struct {
	Service  *osbv1alpha1.SFService
	Plan     *osbv1alpha1.SFPlan
	Instance *osbv1alpha1.SFServiceInstance // nil when unbinding from an instance already gone
	Binding  *osbv1alpha1.SFServiceBinding  // nil for instance operations
	Registry *registry.Registry
	// Fetcher downloads the templates that name a url; nil uses one with
	// the default bounds and any host.
	Fetcher *Fetcher
	// Bounds limit each render (zero: DefaultBounds).
	Bounds Bounds
	// Runner renders in processes of their own, which it stops when they
	// pass the bounds (nil: in this process).
	Runner Runner
	// Cluster is the SFCluster the instance is scheduled on, .cluster in the
	// templates; nil, or one with no name, is the cluster Quartermaster
	// runs in (resourcev1alpha1.LocalCluster).
	Cluster *resourcev1alpha1.SFCluster
	// Predecessor is the binding a binding rotates, while it binds (nil:
	// none).
	Predecessor *Predecessor
}

// Predecessor is what the templates of a binding rotation see of the
// binding it replaces, as .predecessor: the binding, its registry (so that
// a plan can keep the same user) and the keys of its credentials, never
// their values (a plan issues new ones; the old stay in the predecessor's
// Secret until it is unbound).
type Predecessor struct {
	Binding *osbv1alpha1.SFServiceBinding
	// Registry is the predecessor's registry (nil: it has none).
	Registry *registry.Registry
	// CredentialKeys are the keys of its credentials Secret.
	CredentialKeys []string
}

// Values are the variables of a template (see the package doc). Every value
// is JSON-shaped (maps, slices, strings, float64/int64, bools).
type Values map[string]any

// Values returns the variables every template of s sees; scheme gives the
// objects their apiVersion and kind. The sources are added by AddSources.
func (s *Subject) Values(scheme *runtime.Scheme) (Values, error) {
	cluster, err := clusterValue(s.Cluster)
	if err != nil {
		return nil, fmt.Errorf("the template variable .cluster: %w", err)
	}
	v := Values{"cluster": cluster, "registry": s.Registry.Values()}
	objs := map[string]client.Object{"service": s.Service, "plan": s.Plan}
	if s.Instance != nil {
		objs["instance"] = s.Instance
	}
	if s.Binding != nil {
		objs["binding"] = s.Binding
	}
	for key, obj := range objs {
		m, err := toMap(scheme, obj)
		if err != nil {
			return nil, fmt.Errorf("the template variable .%s: %w", key, err)
		}
		v[key] = m
	}
	if p := s.Predecessor; p != nil {
		pred, err := p.values(scheme)
		if err != nil {
			return nil, fmt.Errorf("the template variable .predecessor: %w", err)
		}
		v["predecessor"] = pred
	}
	return v, nil
}

// values is the .predecessor variable.
func (p *Predecessor) values(scheme *runtime.Scheme) (map[string]any, error) {
	binding, err := toMap(scheme, p.Binding)
	if err != nil {
		return nil, err
	}
	reg := map[string]any{}
	if p.Registry != nil {
		reg = p.Registry.Values()
	}
	keys := []any{}
	for _, k := range slices.Sorted(slices.Values(p.CredentialKeys)) {
		keys = append(keys, k)
	}
	return map[string]any{"binding": binding, "registry": reg, "credentialKeys": keys}, nil
}

// AddSources returns a copy of v with each source object under its key.
func (v Values) AddSources(objects map[string]map[string]any) Values {
	out := maps.Clone(v)
	for key, obj := range objects {
		out[key] = obj
	}
	return out
}

// Template returns the plan's template for action, or nil.
func (s *Subject) Template(action osbv1alpha1.TemplateAction) *osbv1alpha1.TemplateSpec {
	for i := range s.Plan.Spec.Templates {
		if s.Plan.Spec.Templates[i].Action == action {
			return &s.Plan.Spec.Templates[i]
		}
	}
	return nil
}

// chartValues are a chart's values: the plan's context, overridden by the
// request's parameters that the plan's schema declares, at the paths it
// maps them to (parameters.ChartValues).
func (s *Subject) chartValues() (map[string]any, error) {
	out := map[string]any{}
	mergeJSON(out, s.Plan.Spec.Context)
	var given map[string]any
	var err error
	switch {
	case s.Binding != nil && s.Binding.Spec.Parameters != nil:
		given, err = parameters.ChartValues(s.Plan, s.Binding.Spec.Parameters.Raw, parameters.BindingCreate)
	case s.Binding == nil && s.Instance != nil && s.Instance.Spec.Parameters != nil:
		given, err = parameters.ChartValues(s.Plan, s.Instance.Spec.Parameters.Raw, parameters.InstanceCreate, parameters.InstanceUpdate)
	}
	if err != nil {
		return nil, err
	}
	maps.Copy(out, given)
	return out, nil
}

// release names the instance or binding a chart is rendered for.
func (s *Subject) release() Release {
	if s.Binding != nil {
		return Release{Name: s.Binding.Name, Namespace: s.Binding.Namespace}
	}
	if s.Instance == nil {
		return Release{}
	}
	return Release{Name: s.Instance.Name, Namespace: s.Instance.Namespace, Upgrade: s.Instance.Status.AppliedSpec != nil}
}

// clusterValue is .cluster: the SFCluster's name, labels and spec, which
// are what an operator registered (its status changes with every probe,
// and a render should not).
func clusterValue(c *resourcev1alpha1.SFCluster) (map[string]any, error) {
	metadata := map[string]any{"name": resourcev1alpha1.LocalCluster}
	v := map[string]any{"apiVersion": resourcev1alpha1.GroupVersion.String(), "kind": "SFCluster", "metadata": metadata}
	if c == nil || c.Name == "" {
		return v, nil
	}
	metadata["name"] = c.Name
	if len(c.Labels) > 0 {
		labels := map[string]any{}
		for k, l := range c.Labels {
			labels[k] = l
		}
		metadata["labels"] = labels
	}
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c.Spec)
	if err != nil {
		return nil, err
	}
	v["spec"] = spec
	return v, nil
}

// toMap converts a typed object to the map a template sees, with its
// apiVersion and kind and without managed fields.
func toMap(scheme *runtime.Scheme, obj client.Object) (map[string]any, error) {
	obj = obj.DeepCopyObject().(client.Object)
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	obj.SetManagedFields(nil)
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// mergeJSON merges a free-form JSON object into dst; anything else is ignored.
func mergeJSON(dst map[string]any, src *apiextensionsv1.JSON) {
	if src == nil || len(src.Raw) == 0 {
		return
	}
	var m map[string]any
	if json.Unmarshal(src.Raw, &m) == nil {
		maps.Copy(dst, m)
	}
}
