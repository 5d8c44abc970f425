// Package trace follows an SFServiceInstance or SFServiceBinding through
// everything that hangs off it: its bindings and their successors, the
// ServiceBindingUsages and ServiceBindings that inject them, the claims
// that hold it, the objects its templates applied with their live state,
// and for each of Quartermaster's resources its latest runs with the whole
// message of a failure. `qm trace` prints it; it only reads.
package trace

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	servicebindingv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	servicecatalogv1alpha1 "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/serviceclass"
	"github.com/quartermaster/qm/workflows/runs"
)

// Node is one resource of the trace and what hangs off it.
type Node struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// State is the resource's state: its status.state, a claim's, or for
	// an applied object "present" or "missing".
	State string `json:"state,omitempty"`
	// Detail is what the resource says of its state: its description, or
	// an applied object's conditions.
	Detail string `json:"detail,omitempty"`
	// Runs are the latest runs of the resource's workflow ID, newest first.
	Runs     []Run  `json:"runs,omitempty"`
	Children []Node `json:"children,omitempty"`
}

// Run is one run of a workflow.
type Run struct {
	WorkflowID string    `json:"workflowId"`
	RunID      string    `json:"runId"`
	Type       string    `json:"type"`
	Status     string    `json:"status"`
	Started    time.Time `json:"started"`
	// Failure is the whole message a failed run ended with.
	Failure string `json:"failure,omitempty"`
}

// Runs finds the latest runs of a workflow ID (at most n, newest first).
type Runs interface {
	Latest(ctx context.Context, workflowID string, n int) ([]Run, error)
}

// latest is how many runs a node shows.
const latest = 3

// Tracer reads what a trace shows.
type Tracer struct {
	Kube client.Reader
	Runs Runs
}

// Instance traces the SFServiceInstance namespace/name.
func (t *Tracer) Instance(ctx context.Context, namespace, name string) (Node, error) {
	var inst osbv1alpha1.SFServiceInstance
	if err := t.Kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &inst); err != nil {
		return Node{}, fmt.Errorf("reading SFServiceInstance %s/%s: %w", namespace, name, err)
	}
	n := Node{Kind: "SFServiceInstance", Namespace: namespace, Name: name, State: string(inst.Status.State), Detail: inst.Status.Description}
	var err error
	if n.Runs, err = t.Runs.Latest(ctx, runs.WorkflowID(lifecycle.InstanceTarget(&inst)), latest); err != nil {
		return Node{}, err
	}
	applied, err := t.applied(ctx, inst.Status.Resources)
	if err != nil {
		return Node{}, err
	}
	n.Children = append(n.Children, applied...)
	var bindings osbv1alpha1.SFServiceBindingList
	if err := t.Kube.List(ctx, &bindings, client.InNamespace(namespace)); err != nil {
		return Node{}, fmt.Errorf("listing the bindings of %s/%s: %w", namespace, name, err)
	}
	for _, b := range bindings.Items {
		if b.Spec.InstanceID != name {
			continue
		}
		child, err := t.Binding(ctx, b.Namespace, b.Name)
		if err != nil {
			return Node{}, err
		}
		n.Children = append(n.Children, child)
	}
	claims, err := t.claims(ctx, namespace, serviceclass.Name("SFServiceInstance", name))
	if err != nil {
		return Node{}, err
	}
	n.Children = append(n.Children, claims...)
	return n, nil
}

// Binding traces the SFServiceBinding namespace/name.
func (t *Tracer) Binding(ctx context.Context, namespace, name string) (Node, error) {
	var b osbv1alpha1.SFServiceBinding
	if err := t.Kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &b); err != nil {
		return Node{}, fmt.Errorf("reading SFServiceBinding %s/%s: %w", namespace, name, err)
	}
	n := Node{Kind: "SFServiceBinding", Namespace: namespace, Name: name, State: string(b.Status.State), Detail: b.Status.Description}
	var err error
	if n.Runs, err = t.Runs.Latest(ctx, runs.WorkflowID(lifecycle.BindingTarget(&b)), latest); err != nil {
		return Node{}, err
	}
	applied, err := t.applied(ctx, b.Status.Resources)
	if err != nil {
		return Node{}, err
	}
	n.Children = append(n.Children, applied...)
	var usages servicecatalogv1alpha1.ServiceBindingUsageList
	if err := t.Kube.List(ctx, &usages, client.InNamespace(namespace)); err != nil {
		return Node{}, fmt.Errorf("listing the usages in %s: %w", namespace, err)
	}
	for _, u := range usages.Items {
		if ref := u.Spec.ServiceBindingRef; ref.Name == name && (ref.Kind == "" || ref.Kind == "SFServiceBinding") {
			n.Children = append(n.Children, Node{Kind: "ServiceBindingUsage", Namespace: u.Namespace, Name: u.Name,
				State: condition(u.Status.Conditions), Detail: fmt.Sprintf("into %s %s", u.Spec.UsedBy.Kind, u.Spec.UsedBy.Name)})
		}
	}
	var sbs servicebindingv1.ServiceBindingList
	if err := t.Kube.List(ctx, &sbs, client.InNamespace(namespace)); err != nil {
		return Node{}, fmt.Errorf("listing the ServiceBindings in %s: %w", namespace, err)
	}
	for _, sb := range sbs.Items {
		if sb.Spec.Service.Kind == "SFServiceBinding" && sb.Spec.Service.Name == name {
			n.Children = append(n.Children, Node{Kind: "ServiceBinding", Namespace: sb.Namespace, Name: sb.Name,
				State: condition(sb.Status.Conditions), Detail: fmt.Sprintf("into %s %s", sb.Spec.Workload.Kind, sb.Spec.Workload.Name)})
		}
	}
	var successors osbv1alpha1.SFServiceBindingList
	if err := t.Kube.List(ctx, &successors, client.InNamespace(namespace), client.MatchingLabels{osbv1alpha1.RotationOfLabel: name}); err != nil {
		return Node{}, fmt.Errorf("listing the successors of %s/%s: %w", namespace, name, err)
	}
	for _, s := range successors.Items {
		child, err := t.Binding(ctx, s.Namespace, s.Name)
		if err != nil {
			return Node{}, err
		}
		child.Kind = "SFServiceBinding (successor)"
		n.Children = append(n.Children, child)
	}
	return n, nil
}

// applied reads each object the templates applied: present with its
// conditions, or missing.
func (t *Tracer) applied(ctx context.Context, sources []osbv1alpha1.Source) ([]Node, error) {
	var out []Node
	for _, s := range sources {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(schema.FromAPIVersionAndKind(s.APIVersion, s.Kind))
		n := Node{Kind: s.Kind, Namespace: s.Namespace, Name: s.Name}
		switch err := t.Kube.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, obj); {
		case apierrors.IsNotFound(err):
			n.State = "missing"
		case err != nil:
			n.State, n.Detail = "unknown", err.Error()
		default:
			n.State, n.Detail = "present", objectConditions(obj)
		}
		out = append(out, n)
	}
	return out, nil
}

// claims are the ServiceClaims, in any namespace, that hold the
// RegisteredService registered of namespace's resource.
func (t *Tracer) claims(ctx context.Context, namespace, registered string) ([]Node, error) {
	var list primazav1alpha1.ServiceClaimList
	if err := t.Kube.List(ctx, &list); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, nil // claims of namespaces the caller may not read
		}
		return nil, fmt.Errorf("listing the claims: %w", err)
	}
	var out []Node
	for _, c := range list.Items {
		if c.Status.RegisteredService == registered {
			out = append(out, Node{Kind: "ServiceClaim", Namespace: c.Namespace, Name: c.Name, State: string(c.Status.State),
				Detail: fmt.Sprintf("holds RegisteredService %s (of %s)", registered, namespace)})
		}
	}
	slices.SortFunc(out, func(a, b Node) int { return compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return out, nil
}
