package runs

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Search attributes that make Quartermaster's workflows findable in the
// Temporal UI, e.g. `QmKind="SFServiceInstance" AND Operation="provision"`.
// All are keywords: SQLite visibility has ten keyword slots, and these use
// all ten. They carry identities and states only, never credentials or
// parameters.
var (
	AttrKind      = temporal.NewSearchAttributeKeyKeyword("QmKind")
	AttrNamespace = temporal.NewSearchAttributeKeyKeyword("QmNamespace")
	AttrName      = temporal.NewSearchAttributeKeyKeyword("QmName")
	AttrInstance  = temporal.NewSearchAttributeKeyKeyword("InstanceID")
	AttrBinding   = temporal.NewSearchAttributeKeyKeyword("BindingID")
	AttrService   = temporal.NewSearchAttributeKeyKeyword("ServiceID")
	AttrPlan      = temporal.NewSearchAttributeKeyKeyword("PlanID")
	AttrCluster   = temporal.NewSearchAttributeKeyKeyword("ClusterID")
	AttrOperation = temporal.NewSearchAttributeKeyKeyword("Operation")
	// AttrState is the state an operation ended in (succeeded or failed),
	// set when its run ends: `QmState="failed"` lists the failures.
	AttrState = temporal.NewSearchAttributeKeyKeyword("QmState")
)

// SearchAttributeKeys lists every search attribute the workflows set; a
// Temporal namespace must have them registered before workflows start.
func SearchAttributeKeys() []temporal.SearchAttributeKeyKeyword {
	return []temporal.SearchAttributeKeyKeyword{
		AttrKind, AttrNamespace, AttrName, AttrInstance, AttrBinding,
		AttrService, AttrPlan, AttrCluster, AttrOperation, AttrState,
	}
}

// EnsureSearchAttributes registers the search attributes the workflows set on
// a Temporal namespace that does not have them yet. The dev server gets them
// at start; a production cluster gets them from the workers as they start,
// and again from the leading watcher when a namespace registered anew lost
// them. Replicas starting together race for the same slots and the server
// refuses the slower one's registration: it looks again, and finds them
// there.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	ops := c.OperatorService()
	for attempt := 1; ; attempt++ {
		have, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
		if err != nil {
			return fmt.Errorf("listing search attributes of namespace %q: %w", namespace, err)
		}
		missing := map[string]enums.IndexedValueType{}
		for _, key := range SearchAttributeKeys() {
			if _, ok := have.GetCustomAttributes()[key.GetName()]; !ok {
				missing[key.GetName()] = enums.INDEXED_VALUE_TYPE_KEYWORD
			}
		}
		if len(missing) == 0 {
			return nil
		}
		_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace:        namespace,
			SearchAttributes: missing,
		})
		if err == nil {
			return nil
		}
		if attempt == 3 {
			return fmt.Errorf("registering search attributes %v on namespace %q: %w", slices.Sorted(maps.Keys(missing)), namespace, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("registering search attributes on namespace %q: %w", namespace, err)
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		}
	}
}
