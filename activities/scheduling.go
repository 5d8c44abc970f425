package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/offerings"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/scheduling"
)

// Scheduling chooses the cluster of a new instance and writes it into the
// instance's spec.clusterId, once.
//
// Decisions taken at the same time must not overshoot a cluster's limit,
// and workers run many provisions at once. Each decision is therefore
// accounted for atomically, in a ledger per namespace (the ConfigMap
// LedgerName): the decision and what it reserves are written there with
// the ledger's resourceVersion as a precondition, so that of two decisions
// made from the same ledger only one is written and the other decides
// again from the new one. Only then is the instance's spec written; a
// step retried after a crash finds its reservation and keeps it.
type Scheduling struct {
	// Client reads and writes the cluster Quartermaster runs in, uncached.
	Client client.Client
	// Instances reads the SFServiceInstances from an informer, so that a
	// decision counts each cluster's instances without listing them all
	// from the API server (nil: through Client). It may lag behind Client:
	// a reservation whose instance it does not show is read again through
	// Client before it is let go.
	Instances client.Reader
	Offerings Offerings
	// Scheduler is how clusters are chosen.
	Scheduler scheduling.Scheduler
	// Bounds limit the render of a plan's clusterSelector.
	Bounds plan.Bounds
	// Renderer renders in processes of their own (nil: in this one).
	Renderer plan.Runner
	// Events records each decision on its instance (nil: none).
	Events record.EventRecorder
	// Runs are the operations whose copies of a run's instance the step
	// shares: it decides from the copy Begin read and leaves the instance
	// it wrote for the apply step, so that a scheduled provision reads its
	// instance once, as any other does (nil: the step reads it).
	Runs *Operations

	turns sync.Map // namespace: *turn
}

// ConditionScheduled is the instance's condition that explains where it
// was scheduled, or why it waits.
const ConditionScheduled = "Scheduled"

// maxLedgerConflicts bounds how often one step decides again because
// another decision was written first, or writes the instance again because
// another write changed it; beyond it the step is retried.
const maxLedgerConflicts = 50

// Schedule chooses the cluster of the provision of tg (begun at
// generation) and writes it into the instance; with none qualifying it
// returns no cluster and why, for the workflow to wait and ask again.
func (s *Scheduling) Schedule(ctx context.Context, tg lifecycle.Target, generation int64) (Scheduled, error) {
	inst, err := s.instance(ctx, tg)
	if err != nil {
		return Scheduled{}, err
	}
	if inst.DeletionTimestamp != nil { // deleted while it waited: the deprovision takes over
		return Scheduled{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("instance %s/%s was deleted before it was scheduled", tg.Namespace, tg.Name), ErrGone, errGone)
	}
	if inst.Spec.ClusterID != "" { // decided before this step was retried
		return Scheduled{Cluster: inst.Spec.ClusterID, Explanation: "scheduled on " + inst.Spec.ClusterID, Generation: inst.Generation}, nil
	}
	p, err := s.Offerings.PlanFor(ctx, inst.Spec.PlanID, inst.Namespace)
	if err != nil {
		if errors.Is(err, offerings.ErrNotFound) {
			return Scheduled{}, unknownPlan(inst.Spec.PlanID)
		}
		return Scheduled{}, err
	}
	req, err := s.request(inst, p)
	if err != nil {
		return Scheduled{}, err
	}
	d, err := s.decideInTurn(ctx, inst, req)
	if err != nil {
		return Scheduled{}, err
	}
	explanation := d.Explain()
	if d.Cluster == "" {
		// Kept as written, so that the step asked again finds what it
		// explained and does not write it again.
		if err := s.explain(ctx, inst, metav1.ConditionFalse, "NoClusterQualifies", explanation); err != nil {
			return Scheduled{}, err
		}
		s.remember(ctx, tg, inst)
		return Scheduled{Explanation: explanation}, nil
	}
	gen, err := s.assign(ctx, inst, d.Cluster, generation)
	if err != nil {
		return Scheduled{}, err
	}
	if s.Events != nil {
		s.Events.Event(inst, corev1.EventTypeNormal, "Scheduled", explanation)
	}
	if err := s.explain(ctx, inst, metav1.ConditionTrue, "Scheduled", explanation); err != nil {
		return Scheduled{}, err
	}
	s.remember(ctx, tg, inst)
	return Scheduled{Cluster: d.Cluster, Explanation: explanation, Generation: gen}, nil
}

// remember keeps inst, as the step wrote it, for the run's next steps.
func (s *Scheduling) remember(ctx context.Context, tg lifecycle.Target, inst *osbv1alpha1.SFServiceInstance) {
	if s.Runs != nil {
		s.Runs.rememberInstance(ctx, tg, inst)
	}
}

// instance is the instance to schedule: the copy the run's Begin read,
// or else read now. A copy outdated since costs a conflict when the
// cluster is written, and a read then (assign).
func (s *Scheduling) instance(ctx context.Context, tg lifecycle.Target) (*osbv1alpha1.SFServiceInstance, error) {
	if s.Runs != nil {
		if inst := s.Runs.recallInstance(ctx, tg); inst != nil {
			return inst, nil
		}
	}
	inst := &osbv1alpha1.SFServiceInstance{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}, inst); err != nil {
		return nil, gone(err, tg)
	}
	return inst, nil
}

// request is what the scheduler needs of the instance's plan.
func (s *Scheduling) request(inst *osbv1alpha1.SFServiceInstance, p *osbv1alpha1.SFPlan) (scheduling.Request, error) {
	demand, err := scheduling.Demand(p.Spec.Context)
	if err != nil {
		return scheduling.Request{}, planError("%s", err)
	}
	req := scheduling.Request{Scheduler: s.Scheduler, Demand: demand}
	subject := &plan.Subject{Plan: p, Instance: inst, Bounds: s.Bounds, Runner: s.Renderer,
		Registry: registry.New(registry.Instance, map[string]string{registry.KeyNamespace: inst.Namespace})}
	if subject.Template(osbv1alpha1.ActionClusterSelector) == nil {
		return req, nil
	}
	values := plan.Values{}
	for key, obj := range map[string]any{"instance": inst, "plan": p} {
		raw, err := json.Marshal(obj)
		if err != nil {
			return req, err
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return req, err
		}
		values[key] = m
	}
	if req.Selector, err = subject.Text(osbv1alpha1.ActionClusterSelector, values); err != nil {
		return req, classify(err)
	}
	return req, nil
}

// clusters is what the scheduler sees of the namespace's SFClusters: their
// last probe, plus what the ledger has reserved on each.
func (s *Scheduling) clusters(ctx context.Context, namespace string, led *ledger) ([]scheduling.Cluster, error) {
	var list resourcev1alpha1.SFClusterList
	if err := s.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the SFClusters of namespace %s: %w", namespace, err)
	}
	var insts osbv1alpha1.SFServiceInstanceList
	// Read-only below: the informer's objects themselves, not copies.
	if err := s.instances().List(ctx, &insts, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the instances of namespace %s: %w", namespace, err)
	}
	count := map[string]int{}
	state := map[string]*osbv1alpha1.SFServiceInstance{}
	for i := range insts.Items {
		in := &insts.Items[i]
		state[in.Name] = in
		if in.Spec.ClusterID != "" {
			count[in.Spec.ClusterID]++
		}
	}
	// A reservation ends once its instance is provisioned (its pods count
	// from the next probe on) or gone.
	requests := map[string]corev1.ResourceList{}
	for name, r := range led.Reserved {
		in, err := s.reserved(ctx, namespace, name, r, state[name])
		if err != nil {
			return nil, err
		}
		switch {
		case in == nil:
			delete(led.Reserved, name)
			continue
		case in.Spec.ClusterID == "":
			count[r.Cluster]++ // decided, not yet written into the instance
		case len(r.Demand) == 0:
			delete(led.Reserved, name) // counted by its spec; nothing to wait a probe for
			continue
		}
		if in.Status.AppliedSpec != nil && !probedSince(list.Items, r.Cluster, in) {
			delete(led.Reserved, name)
			continue
		}
		if requests[r.Cluster] == nil {
			requests[r.Cluster] = corev1.ResourceList{}
		}
		scheduling.Add(requests[r.Cluster], r.Demand)
	}
	views := make([]scheduling.Cluster, 0, len(list.Items))
	for _, c := range list.Items {
		ready := meta.FindStatusCondition(c.Status.Conditions, lifecycle.ConditionReady)
		// The spec's totalCapacity as it is now, over the nodes as probed.
		capacity := c.Status.Allocatable.DeepCopy()
		if capacity == nil {
			capacity = corev1.ResourceList{}
		}
		maps.Copy(capacity, c.Spec.TotalCapacity)
		v := scheduling.Cluster{Name: c.Name, Labels: c.Labels, Instances: count[c.Name],
			Capacity: capacity, Requests: c.Status.Requests.DeepCopy(), LimitPercentage: ptr.Deref(c.Spec.SchedulingLimitPercentage, 0)}
		switch {
		case c.DeletionTimestamp != nil:
			v.NotReadyReason = "being deleted"
		case ready == nil:
			v.NotReadyReason = "not probed yet"
		case ready.Status != metav1.ConditionTrue:
			v.NotReadyReason = ready.Message
		default:
			v.Ready = true
		}
		if v.Requests == nil {
			v.Requests = corev1.ResourceList{}
		}
		scheduling.Add(v.Requests, requests[c.Name])
		views = append(views, v)
	}
	return views, nil
}

// instances is where the instances are counted from.
func (s *Scheduling) instances() client.Reader {
	if s.Instances != nil {
		return s.Instances
	}
	return s.Client
}

// reserved is the instance a reservation was made for, or nil once it is
// gone. cached is what the informer shows of it, if anything: an instance
// created a moment ago may not be there yet, and is read from the API
// server before its reservation is let go.
func (s *Scheduling) reserved(ctx context.Context, namespace, name string, r reservation, cached *osbv1alpha1.SFServiceInstance) (*osbv1alpha1.SFServiceInstance, error) {
	if cached != nil && cached.UID == r.UID {
		return cached, nil
	}
	if s.Instances == nil {
		return nil, nil // the list came from the API server itself
	}
	in := &osbv1alpha1.SFServiceInstance{}
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, in)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading instance %s/%s, which holds a reservation: %w", namespace, name, err)
	case in.UID != r.UID:
		return nil, nil
	}
	return in, nil
}

// reservationGrace is how long after an instance was provisioned its
// cluster must have been probed for the probe to count its pods: the
// controllers of that cluster make the pods of what was applied a little
// later.
const reservationGrace = 10 * time.Second

// probedSince is false once the cluster was probed long enough after the
// instance was provisioned that its pods are in the cluster's requests.
func probedSince(clusters []resourcev1alpha1.SFCluster, name string, in *osbv1alpha1.SFServiceInstance) bool {
	provisioned := meta.FindStatusCondition(in.Status.Conditions, lifecycle.ConditionReady)
	for _, c := range clusters {
		if c.Name == name {
			return provisioned == nil || !c.Status.ProbedAt.After(provisioned.LastTransitionTime.Add(reservationGrace))
		}
	}
	return false
}

// assign writes the cluster into the instance's spec. The provision then
// applies the generation that write made, unless the user changed the
// spec since the provision began: that change is an update's to apply.
func (s *Scheduling) assign(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, cluster string, begun int64) (int64, error) {
	for range maxLedgerConflicts {
		base := inst.DeepCopy()
		inst.Spec.ClusterID = cluster
		err := s.Client.Patch(ctx, inst, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			if base.Generation == begun {
				return inst.Generation, nil
			}
			return begun, nil
		}
		if !apierrors.IsConflict(err) {
			return 0, fmt.Errorf("writing cluster %s into instance %s: %w", cluster, inst.Name, err)
		}
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(inst), inst); err != nil {
			return 0, err
		}
		if inst.Spec.ClusterID != "" {
			return inst.Generation, nil
		}
	}
	// The ledger keeps the reservation: the retried step finds it.
	return 0, fmt.Errorf("writing cluster %s into instance %s: it kept changing under %d writes", cluster, inst.Name, maxLedgerConflicts)
}

// explain writes the Scheduled condition, and while none qualifies the
// explanation as the provision's description, as last_operation shows it.
func (s *Scheduling) explain(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, status metav1.ConditionStatus, reason, message string) error {
	base := inst.DeepCopy()
	changed := meta.SetStatusCondition(&inst.Status.Conditions, metav1.Condition{Type: ConditionScheduled, Status: status,
		Reason: reason, Message: message, ObservedGeneration: inst.Generation})
	if status == metav1.ConditionFalse {
		description := "waiting for a cluster: " + message
		changed = changed || inst.Status.Description != description || inst.Status.State != osbv1alpha1.StateInProgress
		inst.Status.State, inst.Status.Description = osbv1alpha1.StateInProgress, description
	}
	if !changed {
		return nil
	}
	if err := s.Client.Status().Patch(ctx, inst, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("writing why instance %s is scheduled where it is: %w", inst.Name, err)
	}
	return nil
}
