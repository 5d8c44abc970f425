package massupdate

import (
	"context"
	"encoding/json"
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

// Targets are instances to update. In JSON they are grouped by namespace
// and plan, names only: 10,000 of them take about 150 KB of a workflow's
// history instead of a megabyte.
type Targets []Target

// group is how Targets are written: the namespace and plan of a run of
// targets, and their names.
type group struct {
	Namespace string   `json:"ns"`
	PlanID    string   `json:"plan"`
	Names     []string `json:"names"`
}

// MarshalJSON writes consecutive targets of one namespace and plan as one
// group, keeping their order.
func (ts Targets) MarshalJSON() ([]byte, error) {
	groups := []group{}
	for _, t := range ts {
		if n := len(groups); n > 0 && groups[n-1].Namespace == t.Namespace && groups[n-1].PlanID == t.PlanID {
			groups[n-1].Names = append(groups[n-1].Names, t.Name)
			continue
		}
		groups = append(groups, group{Namespace: t.Namespace, PlanID: t.PlanID, Names: []string{t.Name}})
	}
	return json.Marshal(groups)
}

// UnmarshalJSON reads what MarshalJSON wrote, and the list of targets
// that histories recorded before the grouping hold.
func (ts *Targets) UnmarshalJSON(raw []byte) error {
	var items []struct {
		group
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return err
	}
	*ts = (*ts)[:0]
	for _, g := range items {
		if g.Name != "" {
			*ts = append(*ts, Target{Namespace: g.Namespace, Name: g.Name, PlanID: g.PlanID})
		}
		for _, name := range g.Names {
			*ts = append(*ts, Target{Namespace: g.Namespace, Name: name, PlanID: g.PlanID})
		}
	}
	return nil
}

// Selection is what a selector selects now: the instances to update, and
// how many it selects that are current already.
type Selection struct {
	Targets Targets `json:"targets"`
	Skipped int     `json:"skipped"`
}

// Plans finds a plan by its OSB plan ID (the offerings cache).
type Plans interface {
	PlanFor(ctx context.Context, id, namespace string) (*osbv1alpha1.SFPlan, error)
}

// Select lists the instances the selector selects, page by page, and
// sorts them into those to update and those already current. An instance
// being deleted is left out; one of an unknown plan is kept (its update
// fails, saying so).
func Select(ctx context.Context, c ctrlclient.Client, plans Plans, sel Selector) (Selection, error) {
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
			if plan, err := plans.PlanFor(ctx, inst.Spec.PlanID, inst.Namespace); err == nil && Current(inst, plan.Generation) {
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
