package activities

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/plan"
)

// ReasonPlanOutput is the reason of the Warning Events that tell a plan's
// author of output Quartermaster ignored but that is likely a mistake.
const ReasonPlanOutput = "PlanOutput"

// values builds the template variables. withSources adds every object the
// sources template names, as the API server returns it, and returns what
// the plan's author should hear of the sources (plan.SourceList.Warnings),
// each also an Event on the target, once per run.
func (a *Operations) values(ctx context.Context, t *target, subject *plan.Subject, withSources bool) (plan.Values, []string, error) {
	values, err := subject.Values(a.Client.Scheme())
	if err != nil || !withSources {
		return values, nil, err
	}
	list, err := subject.Sources(values)
	if err != nil {
		return nil, nil, classify(err)
	}
	warnings := list.Warnings(t.binding != nil)
	a.warn(ctx, t, warnings)
	objects := map[string]map[string]any{}
	for _, key := range slices.Sorted(maps.Keys(list.Sources)) {
		src := list.Sources[key]
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(src.APIVersion)
		obj.SetKind(src.Kind)
		ns := src.Namespace
		if ns == "" {
			ns = t.Namespace
		}
		// As the plan's applier: a tenant's plan reads no more than its
		// ServiceAccount may.
		err := t.applier.Get(ctx, client.ObjectKey{Namespace: ns, Name: src.Name}, obj)
		switch {
		case err == nil:
			objects[key] = obj.Object
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
			// Absent sources are absent variables: templates test with `with`.
		default:
			return nil, nil, fmt.Errorf("reading source %q (%s %s): %w", key, src.Kind, src.Name, err)
		}
	}
	return values.AddSources(objects), warnings, nil
}

// warn records each warning as a Warning Event on the target, once per run
// and worker: a status is polled again and again, and says the same.
func (a *Operations) warn(ctx context.Context, t *target, warnings []string) {
	if a.Events == nil {
		return
	}
	key := runKey(ctx, t.Target)
	for _, w := range warnings {
		if key != "" {
			if _, seen := a.runs.get().Get(key + "/warned/" + w); seen {
				continue
			}
			a.runs.get().Add(key+"/warned/"+w, struct{}{}, runCacheTTL)
		}
		a.Events.Event(t.object(), corev1.EventTypeWarning, ReasonPlanOutput, w)
	}
}
