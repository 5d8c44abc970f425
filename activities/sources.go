package activities

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/plan"
)

// sourceReads bounds the reads of one status's sources at once.
const sourceReads = 8

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
	objects, err := readSources(ctx, t, list.Sources)
	if err != nil {
		return nil, nil, err
	}
	if t.written != nil {
		// Taken once: a later poll reads what the controllers made of it.
		t.written = nil
		a.remember(ctx, t)
	}
	return values.AddSources(objects), warnings, nil
}

// readSources reads the objects the sources name, as the plan's applier:
// each as the API server returns it, keyed by its source's name; an
// absent one is left out.
func readSources(ctx context.Context, t *target, sources map[string]plan.Source) (map[string]map[string]any, error) {
	// The sources are read at once: one round trip to the API server,
	// not one per source, which under load is most of a poll's time.
	keys := slices.Sorted(maps.Keys(sources))
	read, errs := make([]map[string]any, len(keys)), make([]error, len(keys))
	var g errgroup.Group
	g.SetLimit(sourceReads)
	for i, key := range keys {
		g.Go(func() error {
			src := sources[key]
			obj := &unstructured.Unstructured{}
			obj.SetAPIVersion(src.APIVersion)
			obj.SetKind(src.Kind)
			ns := src.Namespace
			if ns == "" {
				ns = t.Namespace
			}
			if w := t.writtenAs(src.APIVersion, src.Kind, ns, src.Name); w != nil {
				read[i] = w
				return nil
			}
			// As the plan's applier: a tenant's plan reads no more than its
			// ServiceAccount may.
			err := t.applier.Get(ctx, client.ObjectKey{Namespace: ns, Name: src.Name}, obj)
			switch {
			case err == nil:
				read[i] = obj.Object
			case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
				// Absent sources are absent variables: templates test with `with`.
			default:
				errs[i] = fmt.Errorf("reading source %q (%s %s): %w", key, src.Kind, src.Name, err)
			}
			return nil
		})
	}
	_ = g.Wait() // each read's error is in errs
	// The first failure in the sources' order, whichever came first.
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	objects := map[string]map[string]any{}
	for i, key := range keys {
		if read[i] != nil {
			objects[key] = read[i]
		}
	}
	return objects, nil
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

// written keys the answers of an apply's writes by the refs of what it
// applied (both in the template's order).
func written(refs []apply.Ref, answers []*unstructured.Unstructured) map[apply.Ref]map[string]any {
	w := make(map[apply.Ref]map[string]any, len(refs))
	for i, ref := range refs {
		if i < len(answers) && answers[i] != nil {
			w[ref] = answers[i].Object
		}
	}
	return w
}

// writtenAs is a copy of the object of that kind and name the run's apply
// just wrote, or nil. A cluster-scoped object's ref has no namespace,
// while a source without one is looked for in the target's.
func (t *target) writtenAs(apiVersion, kind, namespace, name string) map[string]any {
	for _, ns := range []string{namespace, ""} {
		if obj, ok := t.written[apply.Ref{APIVersion: apiVersion, Kind: kind, Name: name, Namespace: ns}]; ok {
			// A copy: templates may change what they are given (sprig's set).
			return runtime.DeepCopyJSON(obj)
		}
	}
	return nil
}
