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

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
)

// injectInto applies an injection into the workload named name, of kind,
// under the field manager of uid. It returns the kind with the containers
// path it found, and the variables set; a problem is what someone must
// change (or wait for), an error what a retry may fix.
func injectInto(ctx context.Context, c ctrlclient.Client, kind sc.UsageKindSnapshot, namespace, name string, in bindingusage.Injection, uid types.UID) (sc.UsageKindSnapshot, []string, *UsageProblem, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(kind.GVK())
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
		if p := workloadProblem(err, &kind, namespace, name, "get"); p != nil {
			return kind, nil, p, nil
		}
		return kind, nil, nil, fmt.Errorf("reading %s %s/%s: %w", kind.Resource.Kind, namespace, name, err)
	}
	var err error
	if kind.ContainersPath, err = bindingusage.ContainersPath(obj, kind.ContainersPath); err != nil {
		return kind, nil, failed("InvalidPath", "%s %s: %v", kind.Resource.Kind, name, err), nil
	}
	apply, env, err := in.Apply(obj, bindingusage.Paths{Labels: kind.LabelsPath, Containers: kind.ContainersPath})
	var pathErr *bindingusage.PathError
	var conflict *bindingusage.ConflictError
	switch {
	case errors.As(err, &pathErr):
		return kind, nil, failed("InvalidPath", "%s %s: %v", kind.Resource.Kind, name, err), nil
	case errors.As(err, &conflict):
		return kind, nil, failed("Conflict", "%s %s: %v", kind.Resource.Kind, name, err), nil
	case err != nil:
		return kind, nil, nil, err
	}
	if err := c.Patch(ctx, apply, ctrlclient.Apply, ctrlclient.FieldOwner(bindingusage.FieldManager(uid))); err != nil {
		if p := workloadProblem(err, &kind, namespace, name, "patch"); p != nil {
			return kind, nil, p, nil
		}
		return kind, nil, nil, fmt.Errorf("applying the injection into %s %s/%s: %w", kind.Resource.Kind, namespace, name, err)
	}
	return kind, env, nil, nil
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
// manager of uid, which drops exactly the fields it owns.
func removeInjection(ctx context.Context, c ctrlclient.Client, gvk schema.GroupVersionKind, namespace, name string, uid types.UID) error {
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
	err := c.Patch(ctx, bindingusage.Removal(obj), ctrlclient.Apply, ctrlclient.FieldOwner(bindingusage.FieldManager(uid)))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the injection from %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	return nil
}
