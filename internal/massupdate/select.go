package massupdate

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Target is an instance a run updates.
type Target struct {
	Namespace string `json:"ns"`
	Name      string `json:"name"`
	PlanID    string `json:"plan"`
}

// String is namespace/name.
func (t Target) String() string { return t.Namespace + "/" + t.Name }

// Selection is what a selector selects now: the instances to update, and
// how many it selects that are current already.
type Selection struct {
	Targets []Target `json:"targets"`
	Skipped int      `json:"skipped"`
}

// PlanGeneration returns the generation of the plan with an OSB plan ID,
// and whether there is such a plan.
type PlanGeneration func(ctx context.Context, planID string) (int64, bool)

// Select lists the instances the selector selects, page by page, and
// sorts them into those to update and those already current. An instance
// being deleted is left out; one of an unknown plan is kept (its update
// fails, saying so).
func Select(ctx context.Context, c ctrlclient.Client, generation PlanGeneration, sel Selector) (Selection, error) {
	if err := sel.Validate(); err != nil {
		return Selection{}, err
	}
	selector, _ := labels.Parse(sel.Labels)
	opts := []ctrlclient.ListOption{ctrlclient.Limit(500), ctrlclient.MatchingLabelsSelector{Selector: selector}}
	if sel.Namespace != "" {
		opts = append(opts, ctrlclient.InNamespace(sel.Namespace))
	}
	var out Selection
	for cont := ""; ; {
		var list osbv1alpha1.SFServiceInstanceList
		if err := c.List(ctx, &list, append(opts, ctrlclient.Continue(cont))...); err != nil {
			return Selection{}, fmt.Errorf("listing the instances to update: %w", err)
		}
		for i := range list.Items {
			inst := &list.Items[i]
			if !inst.DeletionTimestamp.IsZero() || !sel.Matches(inst) {
				continue
			}
			if gen, ok := generation(ctx, inst.Spec.PlanID); ok && Current(inst, gen) {
				out.Skipped++
				continue
			}
			out.Targets = append(out.Targets, Target{Namespace: inst.Namespace, Name: inst.Name, PlanID: inst.Spec.PlanID})
		}
		if cont = list.Continue; cont == "" {
			return out, nil
		}
	}
}
