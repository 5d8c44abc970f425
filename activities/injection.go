package activities

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
)

// injection is what injectInto did: the kind with the containers path it
// found and the variables set; or a problem, what someone must change (or
// wait for); or, with rollDue, nothing yet.
type injection struct {
	kind    sc.UsageKindSnapshot
	env     []string
	problem *UsageProblem
	// rollDue: only the credentials changed, and roll was false; the
	// activity waits the roll window and injects again with roll.
	rollDue bool
}

// injectInto applies an injection into the workload named name, of kind,
// under the field manager of uid. A change of the credentials alone waits
// for roll (rollout.go); an error is what a retry may fix.
func injectInto(ctx context.Context, c ctrlclient.Client, kind sc.UsageKindSnapshot, namespace, name string, in bindingusage.Injection, uid types.UID, roll bool) (injection, error) {
	out := injection{kind: kind}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(kind.GVK())
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
		if out.problem = workloadProblem(err, &kind, namespace, name, "get"); out.problem != nil {
			return out, nil
		}
		return out, fmt.Errorf("reading %s %s/%s: %w", kind.Resource.Kind, namespace, name, err)
	}
	var err error
	if out.kind.ContainersPath, err = bindingusage.ContainersPath(obj, kind.ContainersPath); err != nil {
		out.problem = failed("InvalidPath", "%s %s: %v", kind.Resource.Kind, name, err)
		return out, nil
	}
	paths := bindingusage.Paths{Labels: kind.LabelsPath, Containers: out.kind.ContainersPath}
	apply, env, err := in.Apply(obj, paths)
	var pathErr *bindingusage.PathError
	var conflict *bindingusage.ConflictError
	switch {
	case errors.As(err, &pathErr):
		out.problem = failed("InvalidPath", "%s %s: %v", kind.Resource.Kind, name, err)
		return out, nil
	case errors.As(err, &conflict):
		out.problem = failed("Conflict", "%s %s: %v", kind.Resource.Kind, name, err)
		return out, nil
	case err != nil:
		return out, err
	}
	if credentialsChanged(obj, paths, in) {
		if !roll {
			out.rollDue = true
			return out, nil
		}
		if err := rollOut(ctx, c, obj, paths, in); err != nil {
			return out, err
		}
	}
	if err := releaseRollout(ctx, c, obj, in.Usage); err != nil {
		return out, err
	}
	if err := c.Patch(ctx, apply, ctrlclient.Apply, ctrlclient.FieldOwner(bindingusage.FieldManager(uid))); err != nil {
		if out.problem = workloadProblem(err, &kind, namespace, name, "patch"); out.problem != nil {
			return out, nil
		}
		return out, fmt.Errorf("applying the injection into %s %s/%s: %w", kind.Resource.Kind, namespace, name, err)
	}
	out.env = env
	return out, nil
}

// workloadProblem turns an error of the API server about a workload into
// the usage's problem; nil for an error a retry may fix.
func workloadProblem(err error, kind *sc.UsageKindSnapshot, namespace, name, verb string) *UsageProblem {
	k := kind.Resource.Kind
	switch {
	case apierrors.IsNotFound(err):
		return pending("WorkloadNotFound", "%s %s does not exist in namespace %s", k, name, namespace)
	case apierrors.IsForbidden(err):
		return failed("Forbidden", "Quartermaster may not %s %s %s (grant it %s on this kind): %v", verb, k, name, verb, err)
	case apierrors.IsConflict(err):
		return failed("Conflict", "%s %s: %v (a field the injection sets is owned by someone else; a list without x-kubernetes-list-type: map is owned whole)", k, name, err)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return failed("Invalid", "the API server refused the injection into %s %s: %v", k, name, err)
	case meta.IsNoMatchError(err):
		return pending("KindNotServed", "%v", err)
	}
	return nil
}

// removeInjection applies nothing into the workload under the field
// manager of uid, which drops exactly the fields it owns: those of the
// injection of usage.
func removeInjection(ctx context.Context, c ctrlclient.Client, gvk schema.GroupVersionKind, namespace, name, usage string, uid types.UID) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	if err := c.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("reading %s %s/%s to remove the injection: %w", gvk.Kind, namespace, name, err)
	}
	// A digest the rollout manager also holds would outlive the apply.
	if err := releaseRollout(ctx, c, obj, usage); err != nil {
		return err
	}
	err := c.Patch(ctx, bindingusage.Removal(obj), ctrlclient.Apply, ctrlclient.FieldOwner(bindingusage.FieldManager(uid)))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the injection from %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	return nil
}

// release lets a deleted usage or ServiceBinding go once its injection is
// removed: obj, read under key, loses finalizer, under the
// resourceVersion it was read at, so that a finalizer another writer
// added meanwhile stays. One that is gone has nothing to release.
func release(ctx context.Context, c ctrlclient.Client, obj ctrlclient.Object, key types.NamespacedName, finalizer string) error {
	if err := c.Get(ctx, key, obj); err != nil {
		return ctrlclient.IgnoreNotFound(err)
	}
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	patch := ctrlclient.MergeFromWithOptions(obj.DeepCopyObject().(ctrlclient.Object), ctrlclient.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(obj, finalizer)
	return ctrlclient.IgnoreNotFound(c.Patch(ctx, obj, patch))
}
