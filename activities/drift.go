package activities

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/drift"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/metrics"
)

// Drift holds the activities of the drift checks: a loop's pass over its
// shard of the instances, and the steps of a Repair run. A check only
// reads, unless it finds drift.
type Drift struct {
	Ops *Operations
	// Instances lists the SFServiceInstances from a cache (nil: through
	// Ops.Client).
	Instances ctrlclient.Reader
	// Temporal starts Repair runs.
	Temporal client.Client
	// Events records drift and repairs on the instance.
	Events record.EventRecorder
	// Versioned: the worker is versioned, so runs it starts are not
	// started eagerly (as MassUpdates).
	Versioned bool
}

// DriftPass asks for one pass over a shard's instances: those whose check
// falls in (From, To].
type DriftPass struct {
	Shard int       `json:"shard"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
}

// DriftPassed is what a pass did, for the run's history and details.
type DriftPassed struct {
	// Instances counts the shard's instances whose plan asks for checks.
	Instances int `json:"instances"`
	Checked   int `json:"checked"`
	// Drifted names the instances found drifted ("shop/kv-1: Service
	// shop/kv-1: deleted"), the first maxChanges; MoreDrifted counts the
	// rest.
	Drifted     []string `json:"drifted,omitempty"`
	MoreDrifted int      `json:"moreDrifted,omitempty"`
	// Repairs counts the Repair runs the pass started.
	Repairs int `json:"repairs,omitempty"`
	// Failed says which instances could not be checked, and why (the
	// first maxChanges): the pass goes on without them, as the next
	// pass's window does not cover this one's again.
	Failed     []string `json:"failed,omitempty"`
	MoreFailed int      `json:"moreFailed,omitempty"`
	// Tick is how long the loop waits before its next pass.
	Tick time.Duration `json:"tick"`
}

// The reasons of condition Drifted.
const (
	ReasonDrifted      = "Drifted"
	ReasonRepairing    = "Repairing"
	ReasonRepaired     = "Repaired"
	ReasonRepairFailed = "RepairFailed"
	ReasonNoDrift      = "NoDrift"
)

// driftTickMax is the longest wait between two passes: a plan that starts
// asking for checks is served within it.
const driftTickMax = time.Minute

// driftConcurrency bounds the instances of one pass compared at once.
const driftConcurrency = 16

// CheckInstances runs one pass: it compares each due instance's objects
// with what its last operation applied, and records what drifted (report)
// or starts its Repair run (repair). An instance that did not drift costs
// reads alone. Only a pass that could not list the instances fails.
func (d *Drift) CheckInstances(ctx context.Context, p DriftPass) (DriftPassed, error) {
	var list osbv1alpha1.SFServiceInstanceList
	if err := d.reader().List(ctx, &list, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return DriftPassed{}, fmt.Errorf("listing SFServiceInstances: %w", err)
	}
	var (
		out = DriftPassed{Tick: driftTickMax}
		mu  sync.Mutex
		sem = make(chan struct{}, driftConcurrency)
		wg  sync.WaitGroup
	)
	for i := range list.Items {
		inst := &list.Items[i]
		if drift.Shard(inst.Namespace, inst.Name) != p.Shard {
			continue
		}
		plan, err := d.Ops.Offerings.PlanFor(ctx, inst.Spec.PlanID, inst.Namespace)
		if err != nil {
			continue // an unknown plan: the instance's operations say so
		}
		s, ok := drift.Of(plan, d.Ops.Catalog.Trusted(plan.Namespace))
		if !ok {
			continue
		}
		out.Instances++
		out.Tick = min(out.Tick, s.Every)
		if !drift.AtRest(inst) || !drift.Due(string(inst.UID), s, p.From, p.To) {
			continue
		}
		own := inst.DeepCopy() // inst is the cache's
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			found, repair, err := d.checkOne(ctx, own, plan, s)
			mu.Lock()
			defer mu.Unlock()
			out.Checked++
			if err != nil {
				out.Failed = append(out.Failed, fmt.Sprintf("%s/%s: %v", own.Namespace, own.Name, err))
			}
			if found != "" {
				out.Drifted = append(out.Drifted, own.Namespace+"/"+own.Name+": "+found)
			}
			if repair {
				out.Repairs++
			}
		})
	}
	wg.Wait()
	out.MoreDrifted, out.Drifted = bounded(out.Drifted)
	out.MoreFailed, out.Failed = bounded(out.Failed)
	return out, nil
}

// bounded sorts list and keeps its first maxChanges, with how many more.
func bounded(list []string) (int, []string) {
	slices.Sort(list)
	if len(list) > maxChanges {
		return len(list) - maxChanges, list[:maxChanges]
	}
	return 0, list
}

func (d *Drift) reader() ctrlclient.Reader {
	if d.Instances != nil {
		return d.Instances
	}
	return d.Ops.Client
}

// checkOne compares one instance and acts on what it finds: it returns the
// drift found ("" for none) and whether it started a Repair run.
func (d *Drift) checkOne(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, plan *osbv1alpha1.SFPlan, s drift.Settings) (string, bool, error) {
	findings, measured, err := d.compare(ctx, inst, plan)
	if err != nil || !measured {
		return "", false, err
	}
	was := meta.FindStatusCondition(inst.Status.Conditions, osbv1alpha1.ConditionDrifted)
	if len(findings) == 0 {
		if was == nil || was.Status != metav1.ConditionTrue {
			return "", false, nil // nothing to write
		}
		return "", false, d.setCondition(ctx, inst, metav1.ConditionFalse, ReasonNoDrift, "no drift found at "+time.Now().UTC().Format(time.RFC3339))
	}
	found := drift.Describe(findings)
	if s.Action == osbv1alpha1.DriftReport {
		if was != nil && was.Status == metav1.ConditionTrue && was.Message == found {
			return found, false, nil // reported already
		}
		metrics.DriftFound(string(s.Action))
		d.event(inst, corev1.EventTypeWarning, ReasonDrifted, found)
		return found, false, d.setCondition(ctx, inst, metav1.ConditionTrue, ReasonDrifted, found)
	}
	runID, err := d.startRepair(ctx, inst, found)
	if err != nil || runID == "" {
		return found, false, err
	}
	metrics.DriftFound(string(s.Action))
	msg := fmt.Sprintf("%s; repair run %s", found, runID)
	d.event(inst, corev1.EventTypeWarning, ReasonRepairing, msg)
	return found, true, d.setCondition(ctx, inst, metav1.ConditionTrue, ReasonRepairing, msg)
}

// compare reads the record of what inst's last operation applied and the
// live objects, and returns what drifted: nothing when there is no record
// of its current render (turned on since, or an operation that did not
// record), which no check can measure (measured false).
//
// The record sits in the instance's namespace, where its users may write.
// So a check reads only what the record lists and the instance owns (the
// stamp of its registry, read from the API server) or lists in its status,
// with the plan's own rights (actAs); and a repair never applies the
// record, but renders again.
func (d *Drift) compare(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, plan *osbv1alpha1.SFPlan) (findings []drift.Finding, measured bool, err error) {
	t := &target{Target: lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: inst.Namespace, Name: inst.Name}, instance: inst, plan: plan}
	if err := d.Ops.reach(ctx, t); err != nil {
		return nil, false, err
	}
	if err := d.Ops.actAs(t); err != nil {
		return nil, false, err
	}
	var secret corev1.Secret
	err = t.kube.Get(ctx, ctrlclient.ObjectKey{Namespace: inst.Namespace, Name: drift.SecretName(inst.Name)}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the record of what it applied: %w", err)
	}
	rec, err := drift.Decode(secret.Data)
	if err != nil || !rec.Current(inst.Generation, plan.Generation) {
		return nil, false, nil
	}
	// The owner whose stamp makes an object the instance's is its registry
	// as the API server has it, never what the record says.
	reg := &metav1.PartialObjectMetadata{}
	reg.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	key := t.registryKey()
	if err := t.kube.Get(ctx, ctrlclient.ObjectKey{Namespace: key.Namespace, Name: key.SecretName()}, reg); err != nil {
		return nil, false, ctrlclient.IgnoreNotFound(err)
	}
	owner := apply.Owner{Name: reg.Name, Namespace: reg.Namespace, UID: reg.UID}
	for i := range rec.Objects {
		applied := &rec.Objects[i]
		if applied.GetAnnotations()[apply.SingletonAnnotation] == "true" {
			continue // shared: its content is its first creator's
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(applied.GroupVersionKind())
		err := t.applier.Get(ctx, ctrlclient.ObjectKeyFromObject(applied), live)
		switch {
		case apierrors.IsNotFound(err):
			if listed(inst, applied) {
				f, _ := drift.Compare(applied, nil)
				findings = append(findings, f)
			}
			continue
		case err != nil:
			return nil, false, fmt.Errorf("reading %s: %w", drift.Name(applied), err)
		case !apply.Ours(live, owner):
			continue // not the instance's: no check of its
		}
		if f, drifted := drift.Compare(applied, live); drifted {
			findings = append(findings, f)
		}
	}
	return findings, true, nil
}

// listed says whether inst's status lists obj among what it applied.
func listed(inst *osbv1alpha1.SFServiceInstance, obj *unstructured.Unstructured) bool {
	return slices.Contains(inst.Status.Resources, apply.RefOf(obj))
}

// setCondition writes condition Drifted on inst, unless an operation
// changed the status since inst was read: the next pass sees it anew.
func (d *Drift) setCondition(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, status metav1.ConditionStatus, reason, msg string) error {
	err := d.patchCondition(ctx, inst, status, reason, msg)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// recordOutcome writes a Repair run's outcome into condition Drifted.
// Unlike a check's write, which yields to any write it did not see, the
// outcome is the last word: a check that compared while the run applied
// may have written NoDrift in between, and the outcome (which names the
// run and what it repaired) would otherwise be lost. On a conflict it
// reads the instance again and writes anew.
func (d *Drift) recordOutcome(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, status metav1.ConditionStatus, reason, msg string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := d.patchCondition(ctx, inst, status, reason, msg)
		if apierrors.IsConflict(err) {
			fresh := &osbv1alpha1.SFServiceInstance{}
			if err := d.Ops.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), fresh); err != nil {
				return err
			}
			*inst = *fresh
		}
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil // gone: nothing to record on
	}
	return err
}

// patchCondition sets condition Drifted on inst, if inst is still the
// version it was read at.
func (d *Drift) patchCondition(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, status metav1.ConditionStatus, reason, msg string) error {
	base := inst.DeepCopy()
	meta.SetStatusCondition(&inst.Status.Conditions, metav1.Condition{Type: osbv1alpha1.ConditionDrifted, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: inst.Generation})
	err := d.Ops.Client.Status().Patch(ctx, inst, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing condition %s: %w", osbv1alpha1.ConditionDrifted, err)
	}
	return err
}

func (d *Drift) event(inst *osbv1alpha1.SFServiceInstance, kind, reason, msg string) {
	if d.Events != nil {
		d.Events.Event(inst, kind, reason, msg)
	}
}
