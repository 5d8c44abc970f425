package activities

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/servicebinding"
	"github.com/quartermaster/qm/workflows/runs"
)

// ServiceBindings holds the activities of the ServiceBinding workflow
// (servicebinding.io): resolve the service's Secret and the workloads,
// project the Secret into them with the binding usages' injection engine
// (under the ServiceBinding's own field manager), record the conditions,
// and on deletion take back exactly what was projected.
type ServiceBindings struct {
	// Client reads and writes the API server directly; its RESTMapper
	// resolves the workloads' and services' kinds.
	Client ctrlclient.Client
	// Offerings names an SFServiceBinding's service (the type file).
	Offerings Offerings
}

// Projection is what ResolveServiceBinding found: names, never values.
type Projection struct {
	// Gone: the ServiceBinding no longer exists. Deleting: it is being
	// deleted.
	Gone, Deleting bool
	UID            types.UID
	Generation     int64
	// Projected is where the status says the projection is now.
	Projected *sbv1.Projected
	// Kind is the workloads' kind with the paths of their pod template,
	// and Workloads those selected now (nil with a Problem).
	Kind      *sc.UsageKindSnapshot
	Workloads []string
	// Secret is the service's Secret; Type and Provider what the service
	// says of itself.
	Secret, Type, Provider string
	Problem                *servicebinding.Problem
}

// ProjectionOutcome is what Project did.
type ProjectionOutcome struct {
	Generation int64
	// Projected is where the projection is after this pass (nil: nowhere).
	Projected *sbv1.Projected
	Secret    string
	Problem   *servicebinding.Problem
}

func bindingProblem(service bool, reason, format string, args ...any) *servicebinding.Problem {
	return &servicebinding.Problem{Reason: reason, Message: fmt.Sprintf(format, args...), Service: service}
}

// ResolveServiceBinding reads the ServiceBinding, holds it with its
// finalizer, and resolves its service's Secret and its workloads.
func (b *ServiceBindings) ResolveServiceBinding(ctx context.Context, t runs.ServiceBindingTarget) (Projection, error) {
	var sb sbv1.ServiceBinding
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, &sb); err != nil {
		if apierrors.IsNotFound(err) {
			return Projection{Gone: true}, nil
		}
		return Projection{}, fmt.Errorf("reading ServiceBinding %s/%s: %w", t.Namespace, t.Name, err)
	}
	p := Projection{UID: sb.UID, Generation: sb.Generation, Deleting: !sb.DeletionTimestamp.IsZero(), Projected: sb.Status.Projected}
	if p.Deleting {
		return p, nil
	}
	if !controllerutil.ContainsFinalizer(&sb, sbv1.Finalizer) {
		patch := ctrlclient.MergeFromWithOptions(sb.DeepCopy(), ctrlclient.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&sb, sbv1.Finalizer)
		if err := b.Client.Patch(ctx, &sb, patch); err != nil {
			return Projection{}, fmt.Errorf("adding the finalizer of ServiceBinding %s/%s: %w", t.Namespace, t.Name, err)
		}
	}
	var err error
	if p.Secret, p.Type, p.Provider, p.Problem, err = b.service(ctx, t.Namespace, sb.Spec.Service); err != nil || p.Problem != nil {
		return p, err
	}
	p.Kind, p.Workloads, p.Problem, err = b.workloads(ctx, t.Namespace, sb.Spec.Workload)
	return p, err
}

// service finds the Secret a service names, and its type and provider.
func (b *ServiceBindings) service(ctx context.Context, namespace string, ref sbv1.ServiceBindingServiceReference) (secret, typ, provider string, p *servicebinding.Problem, err error) {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(ref.APIVersion)
	obj.SetKind(ref.Kind)
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, obj); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return "", "", "", bindingProblem(true, "ServiceNotFound", "%s %s does not exist in namespace %s", ref.Kind, ref.Name, namespace), nil
		case meta.IsNoMatchError(err):
			return "", "", "", bindingProblem(true, "ServiceNotServed", "the API server serves no %s in %s", ref.Kind, ref.APIVersion), nil
		case apierrors.IsForbidden(err):
			return "", "", "", bindingProblem(true, "Forbidden", "Quartermaster may not get %s %s (grant it get on this kind): %v", ref.Kind, ref.Name, err), nil
		}
		return "", "", "", nil, fmt.Errorf("reading %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	secret, why := servicebinding.ServiceSecret(obj)
	if secret == "" {
		return "", "", "", bindingProblem(true, "ServiceNotReady", "%s", why), nil
	}
	typ, provider = b.identity(ctx, obj)
	return secret, typ, provider, nil, nil
}

// identity is what Quartermaster's own Provisioned Services say of their
// type and provider: an SFServiceBinding as any brokered binding, a
// ServiceClaim its class identity's type and provider.
func (b *ServiceBindings) identity(ctx context.Context, obj *unstructured.Unstructured) (typ, provider string) {
	switch obj.GroupVersionKind() {
	case osbv1alpha1.GroupVersion.WithKind("SFServiceBinding"):
		serviceID, _, _ := unstructured.NestedString(obj.Object, "spec", "serviceId")
		return brokeredIdentity(ctx, b.Offerings, serviceID, obj.GetNamespace())
	case primazav1alpha1.GroupVersion.WithKind("ServiceClaim"):
		var claim primazav1alpha1.ServiceClaim
		if runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &claim) == nil {
			return bindingusage.ClaimIdentity(claim.Spec.ServiceClassIdentity)
		}
	}
	return "", ""
}

// workloads resolves the workloads' kind, the paths of their pod template
// (a ClusterWorkloadResourceMapping's, or a PodSpec's) and their names.
func (b *ServiceBindings) workloads(ctx context.Context, namespace string, ref sbv1.ServiceBindingWorkloadReference) (*sc.UsageKindSnapshot, []string, *servicebinding.Problem, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil, bindingProblem(false, "InvalidWorkload", "workload apiVersion %q: %v", ref.APIVersion, err), nil
	}
	mapping, err := b.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		return nil, nil, bindingProblem(false, "WorkloadNotServed", "the API server serves no %s in %s", ref.Kind, ref.APIVersion), nil
	}
	var cwrm sbv1.ClusterWorkloadResourceMapping
	name := servicebinding.MappingName(mapping.Resource.Resource, mapping.Resource.Group)
	var found *sbv1.ClusterWorkloadResourceMapping
	switch err := b.Client.Get(ctx, types.NamespacedName{Name: name}, &cwrm); {
	case err == nil:
		found = &cwrm
	case !apierrors.IsNotFound(err):
		return nil, nil, nil, fmt.Errorf("reading ClusterWorkloadResourceMapping %s: %w", name, err)
	}
	paths, err := servicebinding.Paths(found, gv.Version)
	if err != nil {
		return nil, nil, bindingProblem(false, "InvalidMapping", "%v", err), nil
	}
	kind := &sc.UsageKindSnapshot{Name: name, Resource: sc.ResourceReference{Group: gv.Group, Version: gv.Version, Kind: ref.Kind},
		LabelsPath: paths.Labels, ContainersPath: paths.Containers}
	if ref.Name != "" {
		return kind, []string{ref.Name}, nil, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(ref.Selector)
	if err != nil {
		return nil, nil, bindingProblem(false, "InvalidWorkload", "workload selector: %v", err), nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gv.WithKind(ref.Kind + "List"))
	if err := b.Client.List(ctx, list, ctrlclient.InNamespace(namespace), ctrlclient.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, nil, nil, fmt.Errorf("listing the %s workloads that %s selects: %w", ref.Kind, selector, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, w := range list.Items {
		names = append(names, w.Name)
	}
	slices.Sort(names)
	return kind, names, nil, nil
}

// Project projects the service's Secret into the workloads selected now,
// after taking it back from those no longer selected. A problem is an
// outcome, not an error: the workflow records it and waits for a change.
func (b *ServiceBindings) Project(ctx context.Context, t runs.ServiceBindingTarget, p Projection) (ProjectionOutcome, error) {
	return passThenRoll(ctx, func(roll bool) (ProjectionOutcome, bool, error) { return b.project(ctx, t, p, roll) })
}

// project is Project's pass; rollDue says that it stopped at a workload
// whose credentials alone changed, as roll was false (rollout.go).
func (b *ServiceBindings) project(ctx context.Context, t runs.ServiceBindingTarget, p Projection, roll bool) (out ProjectionOutcome, rollDue bool, err error) {
	out = ProjectionOutcome{Generation: p.Generation, Projected: p.Projected, Problem: p.Problem, Secret: p.Secret}
	if p.Problem != nil {
		return out, false, nil
	}
	gvk := p.Kind.GVK()
	want := &sbv1.Projected{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
	if old := p.Projected; old != nil {
		left := []string{}
		for _, w := range old.Workloads {
			if old.APIVersion == want.APIVersion && old.Kind == want.Kind && slices.Contains(p.Workloads, w) {
				left = append(left, w)
				continue
			}
			if err := removeInjection(ctx, b.Client, schema.FromAPIVersionAndKind(old.APIVersion, old.Kind), t.Namespace, w, servicebinding.UsageName(t.Name), p.UID); err != nil {
				return out, false, err
			}
		}
		out.Projected = &sbv1.Projected{APIVersion: old.APIVersion, Kind: old.Kind, Workloads: left}
	}
	var secret corev1.Secret
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: p.Secret}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			out.Problem = bindingProblem(true, "SecretNotFound", "the service's Secret %s does not exist", p.Secret)
			return out, false, nil
		}
		return out, false, fmt.Errorf("reading Secret %s/%s: %w", t.Namespace, p.Secret, err)
	}
	var sb sbv1.ServiceBinding
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, &sb); err != nil {
		return out, false, ctrlclient.IgnoreNotFound(err)
	}
	in := servicebinding.Injection(&sb, p.Secret, slices.Sorted(maps.Keys(secret.Data)), bindingusage.Hash(secret.Data), p.Type, p.Provider)
	for _, w := range p.Workloads {
		did, err := injectInto(ctx, b.Client, *p.Kind, t.Namespace, w, in, p.UID, roll)
		if err != nil {
			return out, false, err
		}
		if did.problem != nil {
			out.Problem = bindingProblem(false, did.problem.Reason, "%s", did.problem.Message)
			return out, false, nil
		}
		if did.rollDue {
			return out, true, nil
		}
		if out.Projected == nil || out.Projected.APIVersion != want.APIVersion || out.Projected.Kind != want.Kind {
			out.Projected = &sbv1.Projected{APIVersion: want.APIVersion, Kind: want.Kind}
		}
		if !slices.Contains(out.Projected.Workloads, w) {
			out.Projected.Workloads = append(out.Projected.Workloads, w)
		}
	}
	if out.Projected == nil {
		out.Projected = &sbv1.Projected{APIVersion: want.APIVersion, Kind: want.Kind}
	}
	if out.Projected.Workloads == nil {
		out.Projected.Workloads = []string{}
	}
	slices.Sort(out.Projected.Workloads)
	return out, false, nil
}

// RecordServiceBinding writes the outcome to the status, when it changed
// it: the conditions, the Secret projected and where.
func (b *ServiceBindings) RecordServiceBinding(ctx context.Context, t runs.ServiceBindingTarget, o ProjectionOutcome) error {
	var sb sbv1.ServiceBinding
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, &sb); err != nil {
		return ctrlclient.IgnoreNotFound(err)
	}
	base := sb.DeepCopy()
	s := &sb.Status
	s.ObservedGeneration = o.Generation
	s.Projected = o.Projected
	// The Secret the service names, even while it is missing: the
	// watcher wakes the ServiceBinding when it comes.
	s.Binding = nil
	if o.Secret != "" {
		s.Binding = &sbv1.ServiceBindingSecretReference{Name: o.Secret}
	}
	workloads := 0
	if o.Projected != nil {
		workloads = len(o.Projected.Workloads)
	}
	for _, c := range servicebinding.Conditions(o.Generation, o.Problem, o.Secret, workloads) {
		meta.SetStatusCondition(&s.Conditions, c)
	}
	if equality.Semantic.DeepEqual(base.Status, sb.Status) {
		return nil
	}
	return ctrlclient.IgnoreNotFound(b.Client.Status().Patch(ctx, &sb, ctrlclient.MergeFrom(base)))
}

// TakeBackProjection removes the projection from every workload it is in.
func (b *ServiceBindings) TakeBackProjection(ctx context.Context, t runs.ServiceBindingTarget, uid types.UID, projected sbv1.Projected) error {
	gvk := schema.FromAPIVersionAndKind(projected.APIVersion, projected.Kind)
	for _, w := range projected.Workloads {
		if err := removeInjection(ctx, b.Client, gvk, t.Namespace, w, servicebinding.UsageName(t.Name), uid); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseServiceBinding lets the deleted ServiceBinding go: its finalizer
// is removed.
func (b *ServiceBindings) ReleaseServiceBinding(ctx context.Context, t runs.ServiceBindingTarget) error {
	return release(ctx, b.Client, &sbv1.ServiceBinding{}, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, sbv1.Finalizer)
}
