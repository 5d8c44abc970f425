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
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/drift"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/metrics"
)

// Drift holds the activities of the drift checks: a loop's pass over its
// shard of the instances and their bindings, and the steps of a Repair
// run. A check only reads, unless it finds drift.
type Drift struct {
	Ops *Operations
	// Instances lists the SFServiceInstances and SFServiceBindings from a
	// cache (nil: through Ops.Client).
	Instances ctrlclient.Reader
	// Temporal starts Repair runs.
	Temporal client.Client
	// Events records drift and repairs on the instance or binding.
	Events record.EventRecorder
	// Versioned: the worker is versioned, so runs it starts are not
	// started eagerly (as MassUpdates).
	Versioned bool
}

// DriftPass asks for one pass over a shard's instances and their
// bindings: those whose check falls in (From, To].
type DriftPass struct {
	Shard int       `json:"shard"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
}

// DriftPassed is what a pass did, for the run's history and details.
type DriftPassed struct {
	// Instances counts the shard's instances whose plan asks for checks,
	// and Bindings their bindings whose plan does.
	Instances int `json:"instances"`
	Bindings  int `json:"bindings,omitempty"`
	// Checked counts the instances and bindings compared.
	Checked int `json:"checked"`
	// Drifted names the instances and bindings found drifted ("shop/kv-1:
	// Service shop/kv-1: deleted", "binding shop/app: …"), the first
	// maxChanges; MoreDrifted counts the rest.
	Drifted     []string `json:"drifted,omitempty"`
	MoreDrifted int      `json:"moreDrifted,omitempty"`
	// Repairs counts the Repair runs the pass started.
	Repairs int `json:"repairs,omitempty"`
	// Failed says which could not be checked, and why (the first
	// maxChanges): the pass goes on without them, as the next pass's
	// window does not cover this one's again.
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

// driftConcurrency bounds the instances and bindings of one pass compared
// at once.
const driftConcurrency = 16

// driftPass is one pass under way: what it found so far, and the checks
// it runs at once. The counts of what there is to check (Instances,
// Bindings, Tick) are the pass's own goroutine's; mu guards what the
// checks' goroutines add (Checked, Drifted, Failed, Repairs).
type driftPass struct {
	d   *Drift
	out DriftPassed
	mu  sync.Mutex
	sem chan struct{}
	wg  sync.WaitGroup
}

// CheckInstances runs one pass: it compares each due instance's objects,
// then each due binding's, with what its last operation applied, and
// records what drifted (report) or starts its Repair run (repair). One
// that did not drift costs reads alone, and a shard with no instance
// whose plan asks for checks reads no bindings. Only a pass that could not
// list the instances or bindings fails.
func (d *Drift) CheckInstances(ctx context.Context, p DriftPass) (DriftPassed, error) {
	var list osbv1alpha1.SFServiceInstanceList
	if err := d.reader().List(ctx, &list, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return DriftPassed{}, fmt.Errorf("listing SFServiceInstances: %w", err)
	}
	pass := &driftPass{d: d, out: DriftPassed{Tick: driftTickMax}, sem: make(chan struct{}, driftConcurrency)}
	// The shard's instances whose plan asks for checks, by namespace/name:
	// their bindings are the shard's too.
	withChecks := map[ctrlclient.ObjectKey]*osbv1alpha1.SFServiceInstance{}
	for i := range list.Items {
		inst := &list.Items[i]
		if drift.Shard(inst.Namespace, inst.Name) != p.Shard {
			continue
		}
		plan, s, ok := d.settings(ctx, inst.Spec.PlanID, inst.Namespace)
		if !ok {
			continue
		}
		withChecks[ctrlclient.ObjectKeyFromObject(inst)] = inst
		pass.out.Instances++
		pass.out.Tick = min(pass.out.Tick, s.Every)
		if drift.AtRest(inst) && drift.Due(string(inst.UID), s, p.From, p.To) {
			pass.check(ctx, &target{Target: lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: inst.Namespace, Name: inst.Name},
				instance: inst.DeepCopy(), plan: plan}, s) // inst is the cache's
		}
	}
	if len(withChecks) > 0 {
		if err := pass.bindings(ctx, p, withChecks); err != nil {
			pass.wg.Wait()
			return DriftPassed{}, err
		}
	}
	pass.wg.Wait()
	out := pass.out
	out.MoreDrifted, out.Drifted = bounded(out.Drifted)
	out.MoreFailed, out.Failed = bounded(out.Failed)
	return out, nil
}

// bindings checks the due bindings of the shard's instances that are
// checked.
func (p *driftPass) bindings(ctx context.Context, pass DriftPass, instances map[ctrlclient.ObjectKey]*osbv1alpha1.SFServiceInstance) error {
	var list osbv1alpha1.SFServiceBindingList
	if err := p.d.reader().List(ctx, &list, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing SFServiceBindings: %w", err)
	}
	for i := range list.Items {
		b := &list.Items[i]
		inst, ok := instances[ctrlclient.ObjectKey{Namespace: b.Namespace, Name: b.Spec.InstanceID}]
		if !ok {
			continue
		}
		plan, s, ok := p.d.settings(ctx, b.Spec.PlanID, b.Namespace)
		if !ok {
			continue
		}
		p.out.Bindings++
		p.out.Tick = min(p.out.Tick, s.Every)
		if drift.AtRest(b) && drift.Due(string(b.UID), s, pass.From, pass.To) {
			p.check(ctx, &target{Target: lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: b.Namespace, Name: b.Name},
				instance: inst.DeepCopy(), binding: b.DeepCopy(), plan: plan}, s)
		}
	}
	return nil
}

// check compares t on a goroutine of its own, at most driftConcurrency at
// once, and counts what it found.
func (p *driftPass) check(ctx context.Context, t *target, s drift.Settings) {
	p.sem <- struct{}{}
	p.wg.Go(func() {
		defer func() { <-p.sem }()
		found, repair, err := p.d.checkOne(ctx, t, s)
		// A binding may have its instance's name: the findings say which.
		name := t.Namespace + "/" + t.Name
		if t.binding != nil {
			name = "binding " + name
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.out.Checked++
		if err != nil {
			p.out.Failed = append(p.out.Failed, fmt.Sprintf("%s: %v", name, err))
		}
		if found != "" {
			p.out.Drifted = append(p.out.Drifted, name+": "+found)
		}
		if repair {
			p.out.Repairs++
		}
	})
}

// settings are the drift settings of the plan planID as namespace sees
// it, and false when it asks for no checks (or is unknown: the
// operations say so).
func (d *Drift) settings(ctx context.Context, planID, namespace string) (*osbv1alpha1.SFPlan, drift.Settings, bool) {
	plan, err := d.Ops.Offerings.PlanFor(ctx, planID, namespace)
	if err != nil {
		return nil, drift.Settings{}, false
	}
	s, ok := drift.Of(plan, d.Ops.Catalog.Trusted(plan.Namespace))
	return plan, s, ok
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

// checkOne compares one instance or binding and acts on what it finds: it
// returns the drift found ("" for none) and whether it started a Repair
// run.
func (d *Drift) checkOne(ctx context.Context, t *target, s drift.Settings) (string, bool, error) {
	findings, measured, err := d.compare(ctx, t)
	if err != nil || !measured {
		return "", false, err
	}
	obj := t.object()
	was := meta.FindStatusCondition(*osbv1alpha1.ConditionsOf(obj), osbv1alpha1.ConditionDrifted)
	if len(findings) == 0 {
		if was == nil || was.Status != metav1.ConditionTrue {
			return "", false, nil // nothing to write
		}
		return "", false, d.setCondition(ctx, obj, metav1.ConditionFalse, ReasonNoDrift, "no drift found at "+time.Now().UTC().Format(time.RFC3339))
	}
	found := drift.Describe(findings)
	var why string // why a repair cannot be done
	if s.Action == osbv1alpha1.DriftRepair {
		if why, err = d.unrepairable(ctx, t); err != nil {
			return found, false, err
		}
	}
	if s.Action == osbv1alpha1.DriftReport || why != "" {
		report := found
		if why != "" {
			report += "; not repaired: " + why
		}
		if was != nil && was.Status == metav1.ConditionTrue && was.Message == report {
			return found, false, nil // reported already
		}
		metrics.DriftFound(string(osbv1alpha1.DriftReport))
		d.event(obj, corev1.EventTypeWarning, ReasonDrifted, report)
		return found, false, d.setCondition(ctx, obj, metav1.ConditionTrue, ReasonDrifted, report)
	}
	runID, err := d.startRepair(ctx, t, found)
	if err != nil || runID == "" {
		return found, false, err
	}
	metrics.DriftFound(string(s.Action))
	msg := fmt.Sprintf("%s; repair run %s", found, runID)
	d.event(obj, corev1.EventTypeWarning, ReasonRepairing, msg)
	return found, true, d.setCondition(ctx, obj, metav1.ConditionTrue, ReasonRepairing, msg)
}

// unrepairable says why t's drift cannot be repaired ("": it can). A
// repair renders the templates again, and a binding that rotated from a
// predecessor rendered with it: once the predecessor is gone, a render
// would not be the one the binding applied.
func (d *Drift) unrepairable(ctx context.Context, t *target) (string, error) {
	if !t.rotates() {
		return "", nil
	}
	pred, err := d.Ops.readPredecessor(ctx, t)
	if err != nil || pred != nil {
		return "", err
	}
	return fmt.Sprintf("it rotated from binding %s, which is gone, and its templates would not render what they applied then", t.binding.Spec.PredecessorBinding), nil
}

// compare reads the record of what t's last operation applied and the
// live objects, and returns what drifted: nothing when there is no record
// of its current render (turned on since, a plan changed since a binding
// was bound, or an operation that did not record), which no check can
// measure (measured false).
//
// The record sits in the namespace, where its users may write. So a check
// reads only what the record lists and t owns (the stamp of its registry,
// read from the API server) or lists in its status, with the plan's own
// rights (actAs); and a repair never applies the record, but renders
// again.
func (d *Drift) compare(ctx context.Context, t *target) (findings []drift.Finding, measured bool, err error) {
	if err := d.Ops.reach(ctx, t); err != nil {
		return nil, false, err
	}
	if err := d.Ops.actAs(t); err != nil {
		return nil, false, err
	}
	var secret corev1.Secret
	err = t.kube.Get(ctx, ctrlclient.ObjectKey{Namespace: t.Namespace, Name: drift.SecretName(t.Kind, t.Name)}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the record of what it applied: %w", err)
	}
	rec, err := drift.Decode(secret.Data)
	if err != nil || !rec.Current(t.object().GetGeneration(), t.plan.Generation) {
		return nil, false, nil
	}
	// The owner whose stamp makes an object t's is its registry as the API
	// server has it, never what the record says.
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
			if slices.Contains(t.resources(), apply.RefOf(applied)) {
				f, _ := drift.Compare(applied, nil)
				findings = append(findings, f)
			}
			continue
		case err != nil:
			return nil, false, fmt.Errorf("reading %s: %w", drift.Name(applied), err)
		case !apply.Ours(live, owner):
			continue // not t's: no check of its
		}
		if f, drifted := drift.Compare(applied, live); drifted {
			findings = append(findings, f)
		}
	}
	return findings, true, nil
}
