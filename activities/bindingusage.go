package activities

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

// BindingUsages holds the activities of the ServiceBindingUsage workflow:
// resolve what a usage names, inject the binding into its workload with
// server-side apply under the usage's own field manager, record the
// outcome, and on deletion remove exactly what was injected.
type BindingUsages struct {
	// Client reads and writes the API server directly; its RESTMapper
	// resolves the UsageKinds' resources.
	Client ctrlclient.Client
	// Offerings names a binding's service (the volume's type file).
	Offerings Offerings
}

// UsageProblem is why a usage is not Ready: its state (Pending while
// something it names is missing, Failed when someone must change
// something), the Ready condition's reason and a message.
type UsageProblem struct {
	State   sc.UsageState `json:"state"`
	Reason  string        `json:"reason"`
	Message string        `json:"message"`
}

// Injected is where a usage's injection is: the UsageKind snapshot it was
// made with and the workload's name.
type Injected struct {
	Kind     sc.UsageKindSnapshot `json:"kind"`
	Workload string               `json:"workload"`
}

// Usage is what Resolve found: names, never values.
type Usage struct {
	// Gone: the usage no longer exists. Deleting: it is being deleted.
	Gone, Deleting bool
	UID            types.UID
	Generation     int64
	// Injected is what the status says is injected now.
	Injected *Injected
	// Kind is the UsageKind resolved now (nil with a Problem).
	Kind *sc.UsageKindSnapshot
	// Workload, Binding and Secret name the workload, the binding and the
	// Secret of its credentials.
	Workload, Binding, Secret string
	EnvPrefix                 string
	Volume                    bool
	Type, Provider            string
	Problem                   *UsageProblem
}

// UsageOutcome is what Inject did.
type UsageOutcome struct {
	Generation int64
	// Injected is what is injected after this pass (nil: nothing).
	Injected *Injected
	Secret   string
	Env      []string
	Problem  *UsageProblem
}

func pending(reason, format string, args ...any) *UsageProblem {
	return &UsageProblem{State: sc.UsagePending, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func failed(reason, format string, args ...any) *UsageProblem {
	return &UsageProblem{State: sc.UsageFailed, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ResolveUsage reads the usage, holds it with its finalizer, and resolves the
// UsageKind and the binding it names.
func (b *BindingUsages) ResolveUsage(ctx context.Context, t runs.UsageTarget) (Usage, error) {
	var usage sc.ServiceBindingUsage
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, &usage); err != nil {
		if apierrors.IsNotFound(err) {
			return Usage{Gone: true}, nil
		}
		return Usage{}, fmt.Errorf("reading ServiceBindingUsage %s/%s: %w", t.Namespace, t.Name, err)
	}
	u := Usage{UID: usage.UID, Generation: usage.Generation, Deleting: !usage.DeletionTimestamp.IsZero(),
		Workload: usage.Spec.UsedBy.Name, Binding: usage.Spec.ServiceBindingRef.Name}
	if usage.Status.UsageKind != nil && usage.Status.Workload != "" {
		u.Injected = &Injected{Kind: *usage.Status.UsageKind, Workload: usage.Status.Workload}
	}
	if u.Deleting {
		return u, nil
	}
	if !controllerutil.ContainsFinalizer(&usage, sc.UsageProtection) {
		patch := ctrlclient.MergeFromWithOptions(usage.DeepCopy(), ctrlclient.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&usage, sc.UsageProtection)
		if err := b.Client.Patch(ctx, &usage, patch); err != nil {
			return Usage{}, fmt.Errorf("adding the finalizer of ServiceBindingUsage %s/%s: %w", t.Namespace, t.Name, err)
		}
	}
	if p := usage.Spec.Parameters; p != nil {
		u.Volume = p.Volume
		if p.EnvPrefix != nil {
			u.EnvPrefix = p.EnvPrefix.Name
		}
	}
	var kind sc.UsageKind
	if err := b.Client.Get(ctx, types.NamespacedName{Name: usage.Spec.UsedBy.Kind}, &kind); err != nil {
		if !apierrors.IsNotFound(err) {
			return Usage{}, fmt.Errorf("reading UsageKind %s: %w", usage.Spec.UsedBy.Kind, err)
		}
		u.Problem = pending("UsageKindNotFound", "there is no UsageKind %q (kubectl get usagekinds lists them)", usage.Spec.UsedBy.Kind)
		return u, nil
	}
	mapping, err := bindingusage.Resolve(b.Client.RESTMapper(), kind.Spec.Resource)
	if err != nil {
		u.Problem = pending("KindNotServed", "UsageKind %s: %v", kind.Name, err)
		return u, nil
	}
	gvk := mapping.GroupVersionKind
	u.Kind = &sc.UsageKindSnapshot{Name: kind.Name, Resource: sc.ResourceReference{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		LabelsPath: kind.Spec.LabelsPath, ContainersPath: kind.Spec.ContainersPath}
	u.Secret, u.Type, u.Provider, u.Problem, err = b.binding(ctx, t.Namespace, usage.Spec.ServiceBindingRef)
	return u, err
}

// binding finds the Secret of the binding a usage names, and what the
// volume's type and provider files say.
func (b *BindingUsages) binding(ctx context.Context, namespace string, ref sc.BindingReference) (secret, typ, provider string, p *UsageProblem, err error) {
	key := types.NamespacedName{Namespace: namespace, Name: ref.Name}
	if ref.Kind == sc.BindingKindServiceClaim {
		var claim primazav1alpha1.ServiceClaim
		if err := b.Client.Get(ctx, key, &claim); err != nil {
			if apierrors.IsNotFound(err) {
				return "", "", "", pending("BindingNotFound", "there is no ServiceClaim %s", ref.Name), nil
			}
			return "", "", "", nil, fmt.Errorf("reading ServiceClaim %s: %w", key, err)
		}
		typ, provider = bindingusage.ClaimIdentity(claim.Spec.ServiceClassIdentity)
		if claim.Status.Binding == nil {
			return "", "", "", pending("BindingNotReady", "ServiceClaim %s holds no service yet (%s)", ref.Name, cmp.Or(string(claim.Status.State), "new")), nil
		}
		return claim.Status.Binding.Name, typ, provider, nil, nil
	}
	var binding osbv1alpha1.SFServiceBinding
	if err := b.Client.Get(ctx, key, &binding); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", "", pending("BindingNotFound", "there is no SFServiceBinding %s", ref.Name), nil
		}
		return "", "", "", nil, fmt.Errorf("reading SFServiceBinding %s: %w", key, err)
	}
	if binding.Status.Response.SecretRef == "" {
		return "", "", "", pending("BindingNotReady", "SFServiceBinding %s has no credentials yet (its bind is %s)", ref.Name, cmp.Or(string(binding.Status.State), "not started")), nil
	}
	typ, provider = brokeredIdentity(ctx, b.Offerings, binding.Spec.ServiceID, binding.Namespace)
	return binding.Status.Response.SecretRef, typ, provider, nil, nil
}

// brokeredIdentity is the type and provider of a binding Quartermaster
// brokered, for a servicebinding.io volume: its service's name (its ID once
// the service is no longer registered), and bindingusage.Provider.
func brokeredIdentity(ctx context.Context, offerings Offerings, serviceID, namespace string) (typ, provider string) {
	typ = serviceID
	if offerings != nil {
		if svc, err := offerings.ServiceFor(ctx, serviceID, namespace); err == nil {
			typ = svc.Spec.Name
		}
	}
	return typ, bindingusage.Provider
}

// Inject applies the usage's injection into its workload, first removing
// it from a workload it no longer names. A problem is an outcome, not an
// error: the workflow records it and waits for a change.
func (b *BindingUsages) Inject(ctx context.Context, t runs.UsageTarget, u Usage) (UsageOutcome, error) {
	return passThenRoll(ctx, func(roll bool) (UsageOutcome, bool, error) { return b.inject(ctx, t, u, roll) })
}

// inject is Inject's pass; rollDue says that it wrote nothing because only
// the credentials changed, and roll was false (rollout.go).
func (b *BindingUsages) inject(ctx context.Context, t runs.UsageTarget, u Usage, roll bool) (out UsageOutcome, rollDue bool, err error) {
	out = UsageOutcome{Generation: u.Generation, Injected: u.Injected, Problem: u.Problem}
	if u.Injected != nil && (u.Kind == nil || u.Injected.Workload != u.Workload || u.Injected.Kind.Resource != u.Kind.Resource) && u.Problem == nil {
		if err := b.RemoveInjection(ctx, t, u.UID, *u.Injected); err != nil {
			return out, false, err
		}
		out.Injected = nil
	}
	if u.Problem != nil {
		return out, false, nil
	}
	var secret corev1.Secret
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: u.Secret}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			out.Problem = pending("SecretNotFound", "the credentials Secret %s of %s does not exist", u.Secret, u.Binding)
			return out, false, nil
		}
		return out, false, fmt.Errorf("reading Secret %s/%s: %w", t.Namespace, u.Secret, err)
	}
	in := bindingusage.Injection{Usage: t.Name, Binding: u.Binding, Secret: u.Secret, Keys: slices.Sorted(maps.Keys(secret.Data)),
		Hash: bindingusage.Hash(secret.Data), EnvPrefix: u.EnvPrefix, Volume: u.Volume, Type: u.Type, Provider: u.Provider}
	did, err := injectInto(ctx, b.Client, *u.Kind, t.Namespace, u.Workload, in, u.UID, roll)
	if did.problem != nil || did.rollDue || err != nil {
		out.Problem = did.problem
		return out, did.rollDue, err
	}
	out.Injected, out.Secret, out.Env = &Injected{Kind: did.kind, Workload: u.Workload}, u.Secret, did.env
	return out, false, nil
}

// RecordUsage writes the outcome to the usage's status, when it changed it.
func (b *BindingUsages) RecordUsage(ctx context.Context, t runs.UsageTarget, o UsageOutcome) error {
	var usage sc.ServiceBindingUsage
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, &usage); err != nil {
		return ctrlclient.IgnoreNotFound(err)
	}
	base := usage.DeepCopy()
	s := &usage.Status
	s.ObservedGeneration = o.Generation
	s.UsageKind, s.Workload = nil, ""
	if o.Injected != nil {
		s.UsageKind, s.Workload = &o.Injected.Kind, o.Injected.Workload
	}
	cond := metav1.Condition{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Injected", ObservedGeneration: o.Generation}
	if o.Problem == nil {
		s.State, s.Secret, s.Env = sc.UsageReady, o.Secret, o.Env
		cond.Message = fmt.Sprintf("%d variables from Secret %s injected into %s %s", len(o.Env), o.Secret, o.Injected.Kind.Resource.Kind, o.Injected.Workload)
	} else {
		s.State = o.Problem.State
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, o.Problem.Reason, o.Problem.Message
	}
	meta.SetStatusCondition(&s.Conditions, cond)
	if equality.Semantic.DeepEqual(base.Status, usage.Status) {
		return nil
	}
	if err := b.Client.Status().Patch(ctx, &usage, ctrlclient.MergeFrom(base)); err != nil {
		return ctrlclient.IgnoreNotFound(err)
	}
	return nil
}

// RemoveInjection removes the usage's injection from a workload: an apply of
// nothing under the usage's field manager drops exactly the fields it
// owns. A workload that is gone has nothing to remove.
func (b *BindingUsages) RemoveInjection(ctx context.Context, t runs.UsageTarget, uid types.UID, in Injected) error {
	return removeInjection(ctx, b.Client, in.Kind.GVK(), t.Namespace, in.Workload, t.Name, uid)
}

// ReleaseUsage lets the deleted usage go: its finalizer is removed.
func (b *BindingUsages) ReleaseUsage(ctx context.Context, t runs.UsageTarget) error {
	return release(ctx, b.Client, &sc.ServiceBindingUsage{}, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, sc.UsageProtection)
}
