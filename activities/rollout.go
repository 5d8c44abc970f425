package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/servicebinding"
)

// A workload rolls when a digest in its pod template changes. When only
// the credentials of an injection changed (the workload carries its digest,
// and another), the pass waits a window first (passThenRoll), so that the
// other Secrets of the workload that change with it (a claim's copy of a
// rotated binding, two bindings rotated together) are there too; then one
// merge patch writes every new digest at once (rollOut). Each projection's
// own apply then finds its digest in place and changes nothing.
//
// The window is waited in the activity, not on a workflow timer: the
// usages' and ServiceBindings' histories stay what an older release
// replays after a rollback.

// rollWindow is long enough for a claim's Secret to follow the binding's
// it copies, and well inside the local activities' timeout.
const rollWindow = 3 * time.Second

// passThenRoll runs a pass that does not roll; when it says a roll is due
// (it wrote nothing), it waits out the window and runs the pass again,
// rolling.
func passThenRoll[T any](ctx context.Context, pass func(roll bool) (T, bool, error)) (T, error) {
	out, rollDue, err := pass(false)
	if !rollDue || err != nil {
		return out, err
	}
	select {
	case <-ctx.Done():
		return out, ctx.Err()
	case <-time.After(rollWindow):
	}
	out, _, err = pass(true)
	return out, err
}

// credentialsChanged says whether the workload carries the injection's
// digest, and another one: the Secret's data changed since it was written.
func credentialsChanged(obj *unstructured.Unstructured, paths bindingusage.Paths, in bindingusage.Injection) bool {
	cur, found, _ := unstructured.NestedString(obj.Object, append(fieldPath(paths.Annotations()), bindingusage.HashKey(in.Usage))...)
	return found && cur != in.Hash
}

// rollOut writes, in one patch under bindingusage.RolloutManager, the
// digest of every projection into obj whose Secret changed: in's, and
// those of the other usages and ServiceBindings whose digests obj carries.
// obj is the workload as it is after the patch.
func rollOut(ctx context.Context, c ctrlclient.Client, obj *unstructured.Unstructured, paths bindingusage.Paths, in bindingusage.Injection) error {
	path := fieldPath(paths.Annotations())
	annotations, _, err := unstructured.NestedStringMap(obj.Object, path...)
	if err != nil {
		return fmt.Errorf("reading the pod annotations of %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	stale := map[string]any{}
	for key, cur := range annotations {
		usage, ok := bindingusage.HashKeyUsage(key)
		if !ok {
			continue
		}
		digest := in.Hash
		if usage != in.Usage {
			if digest, err = peerDigest(ctx, c, obj.GetNamespace(), usage); err != nil {
				return err
			}
		}
		if digest != "" && digest != cur {
			stale[key] = digest
		}
	}
	if len(stale) == 0 {
		return nil
	}
	patch := map[string]any{}
	if err := unstructured.SetNestedField(patch, stale, path...); err != nil {
		return err
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, obj, ctrlclient.RawPatch(types.MergePatchType, body), ctrlclient.FieldOwner(bindingusage.RolloutManager)); err != nil {
		return fmt.Errorf("rolling %s %s/%s with the new credentials: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// peerDigest is the digest of the Secret that another projection into the
// workload (a usage, or "sb-" and a ServiceBinding) projects now; "" when
// it projects none, or its name is not one this finds (a shortened key),
// so that it rolls on its own pass.
func peerDigest(ctx context.Context, c ctrlclient.Client, namespace, usage string) (string, error) {
	secret := ""
	var u sc.ServiceBindingUsage
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: usage}, &u)
	switch {
	case err == nil:
		if u.Status.State == sc.UsageReady {
			secret = u.Status.Secret
		}
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading ServiceBindingUsage %s/%s: %w", namespace, usage, err)
	}
	if name, ok := strings.CutPrefix(usage, servicebinding.UsageName("")); ok && secret == "" {
		var sb sbv1.ServiceBinding
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sb)
		switch {
		case err == nil:
			if sb.Status.Binding != nil && meta.IsStatusConditionTrue(sb.Status.Conditions, lifecycle.ConditionReady) {
				secret = sb.Status.Binding.Name
			}
		case !apierrors.IsNotFound(err):
			return "", fmt.Errorf("reading ServiceBinding %s/%s: %w", namespace, name, err)
		}
	}
	if secret == "" {
		return "", nil
	}
	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: secret}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading Secret %s/%s: %w", namespace, secret, err)
	}
	return bindingusage.Hash(s.Data), nil
}

// releaseRollout gives up the rollout manager's hold on the injection's
// digest, a change of metadata alone: the projection's own apply owns it
// again, may change it without a conflict, and removes it when it goes.
// The test of the resourceVersion makes the replacement of the managed
// fields safe against any write in between (which a retry reads).
func releaseRollout(ctx context.Context, c ctrlclient.Client, obj *unstructured.Unstructured, usage string) error {
	entries := obj.GetManagedFields()
	kept := make([]metav1.ManagedFieldsEntry, 0, len(entries))
	changed := false
	for _, e := range entries {
		if e.Manager == bindingusage.RolloutManager && e.FieldsV1 != nil {
			raw, dropped, empty, err := bindingusage.DropField(e.FieldsV1.Raw, bindingusage.HashKey(usage))
			if err != nil {
				return fmt.Errorf("%s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			}
			if dropped {
				changed = true
				if empty {
					continue
				}
				e.FieldsV1 = &metav1.FieldsV1{Raw: raw}
			}
		}
		kept = append(kept, e)
	}
	if !changed || len(kept) == 0 {
		return nil
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": kept},
	})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, obj, ctrlclient.RawPatch(types.JSONPatchType, body), ctrlclient.FieldOwner(bindingusage.RolloutManager)); err != nil {
		return fmt.Errorf("handing the digest %s of %s %s/%s back: %w", bindingusage.HashKey(usage), obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// fieldPath splits a dotted path of the pod template.
func fieldPath(path string) []string { return strings.Split(path, ".") }
