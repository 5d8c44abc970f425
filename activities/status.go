package activities

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// status is the part of an instance's or binding's status that operations
// write, so that one patch function serves both kinds.
type status struct {
	State              osbv1alpha1.OperationState
	Description        string
	Error              string
	DashboardURL       string                        // instances only
	Metadata           *osbv1alpha1.InstanceMetadata // instances only
	InstanceUsable     *bool                         // instances only
	UpdateRepeatable   *bool                         // instances only
	BindingResponse    osbv1alpha1.BindingResponse   // bindings only
	Resources          []osbv1alpha1.Source
	ObservedGeneration int64
	Conditions         []metav1.Condition
	applied            bool
}

// recordApplied makes the patch record the current spec as the applied one.
func (s *status) recordApplied() { s.applied = true }

// patchStatus changes the target's status with mutate and writes the change
// as a merge patch of the status subresource.
func (a *Operations) patchStatus(ctx context.Context, t *target, mutate func(*status)) error {
	obj := t.object()
	base := obj.DeepCopyObject().(client.Object)
	var s status
	if b := t.binding; b != nil {
		st := &b.Status
		s = status{State: st.State, Description: st.Description, Error: st.Error, BindingResponse: st.Response,
			Resources: st.Resources, ObservedGeneration: st.ObservedGeneration, Conditions: st.Conditions}
		mutate(&s)
		st.State, st.Description, st.Error, st.Response = s.State, s.Description, s.Error, s.BindingResponse
		st.Binding = nil
		if st.Response.SecretRef != "" && !t.remote {
			st.Binding = &osbv1alpha1.SecretReference{Name: st.Response.SecretRef}
		}
		st.Resources, st.ObservedGeneration, st.Conditions = s.Resources, s.ObservedGeneration, s.Conditions
		if s.applied {
			st.AppliedSpec = b.Spec.DeepCopy()
		}
		if t.instance != nil {
			st.ClusterID = t.instance.Spec.ClusterID
		}
	} else {
		i := t.instance
		st := &i.Status
		s = status{State: st.State, Description: st.Description, Error: st.Error, DashboardURL: st.DashboardURL,
			Metadata: st.Metadata, InstanceUsable: st.InstanceUsable, UpdateRepeatable: st.UpdateRepeatable,
			Resources: st.Resources, ObservedGeneration: st.ObservedGeneration, Conditions: st.Conditions}
		mutate(&s)
		st.State, st.Description, st.Error, st.DashboardURL, st.Metadata = s.State, s.Description, s.Error, s.DashboardURL, s.Metadata
		st.InstanceUsable, st.UpdateRepeatable = s.InstanceUsable, s.UpdateRepeatable
		st.Resources, st.ObservedGeneration, st.Conditions = s.Resources, s.ObservedGeneration, s.Conditions
		if s.applied {
			st.AppliedSpec = i.Spec.DeepCopy()
			if t.renderedPlan > 0 {
				st.AppliedPlanGeneration = t.renderedPlan
			}
		}
	}
	if err := a.Client.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("writing the status of %s %s/%s: %w", t.Kind, t.Namespace, t.Name, gone(err, t.Target))
	}
	a.remember(ctx, t) // the patched object, as the API server returned it
	return nil
}

// inProgress marks the operation as running.
func inProgress(op lifecycle.Operation) func(*status) {
	return func(s *status) {
		s.State = osbv1alpha1.StateInProgress
		s.Description = inProgressDescription(op)
		s.Error = ""
	}
}

// inProgressDescription is what the status says of an operation under way
// while its templates say nothing more.
func inProgressDescription(op lifecycle.Operation) string {
	return fmt.Sprintf("%s in progress", op)
}

// RecordRetry shows on the resource that a step is being retried: "in
// progress", with the attempt and the error as the description, so that
// kubectl and last_operation are never blank while the workflow retries.
func (a *Operations) RecordRetry(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation, description string) error {
	t, err := a.loadObjects(ctx, tg, op)
	if err != nil {
		return err
	}
	return a.patchStatus(ctx, t, func(s *status) {
		s.State = osbv1alpha1.StateInProgress
		s.Description = description
		s.Error = ""
	})
}

// recordMetadata keeps the OSB metadata a provision's or an update's status
// reports in the instance's status, where the OSB API reads it; it writes
// only when the metadata changed. Metadata is written here rather than by
// Finish so that it never travels through a workflow's history.
func (a *Operations) recordMetadata(ctx context.Context, t *target, op lifecycle.Operation, md *osbv1alpha1.InstanceMetadata) error {
	if md == nil || t.binding != nil || (op != lifecycle.OpProvision && op != lifecycle.OpUpdate) {
		return nil
	}
	if equality.Semantic.DeepEqual(t.instance.Status.Metadata, md) {
		return nil
	}
	return a.patchStatus(ctx, t, func(s *status) { s.Metadata = md })
}

// RecordResources marks the operation in progress and lists what the
// templates applied in the status, before the operation waits for its
// status template: a user sees them while it waits.
func (a *Operations) RecordResources(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation, refs []osbv1alpha1.Source) error {
	t, err := a.loadObjects(ctx, tg, op)
	if err != nil {
		return err
	}
	return a.patchStatus(ctx, t, func(s *status) {
		inProgress(op)(s)
		if t.observed != "" {
			s.Description = t.observed
		}
		s.Resources = refs
	})
}
