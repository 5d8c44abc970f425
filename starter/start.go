package starter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/workflows/runs"
)

// Starter maps the state of a resource to the workflow that moves it on.
type Starter struct {
	// Client reads resources (from the manager's cache in the watcher) and
	// adds finalizers.
	Client ctrlclient.Client
	// Temporal starts the workflows.
	Temporal client.Client
	// TemporalAddress names the engine in the Started condition's message.
	TemporalAddress string
	// Live reads the API server itself, not the cache: the watcher checks
	// that a resource is still there before it starts its removal.
	Live ctrlclient.Reader
	// Catalog is the trust boundary: only its plans' fairness weights
	// count.
	Catalog tenancy.Boundary

	startedOnce sync.Once
	started     *utilcache.LRUExpireCache // operations started, by startedKey
}

// A resource reads the same while its operation runs (the workflow writes
// "in progress" only if it has to wait) and, from a lagging cache, even
// after it ended: each of those reads would start the operation again, and
// once the first run has closed, that start is a second, idle run. The
// Starter remembers what it started instead, until the resource shows the
// outcome or startedTTL passes (then a run that died is started again).
const (
	startedSize = 100000
	startedTTL  = time.Minute
)

func (s *Starter) memo() *utilcache.LRUExpireCache {
	s.startedOnce.Do(func() { s.started = utilcache.NewLRUExpireCache(startedSize) })
	return s.started
}

// startedKey names an operation started for obj. An instance is
// provisioned once, whatever its generation: the scheduler's own write of
// spec.clusterId raises it while the provision runs, and would otherwise
// have the watcher try to start the provision again (a start refused as
// already running, a describe of the run, and a look every 2 s until it
// ends).
func startedKey(obj ctrlclient.Object, op lifecycle.Operation) string {
	if op == lifecycle.OpProvision {
		return fmt.Sprintf("%s/%s", obj.GetUID(), op)
	}
	return fmt.Sprintf("%s/%d/%s", obj.GetUID(), obj.GetGeneration(), op)
}

// settled forgets what was started for obj's generation: its outcome is
// written, and a new request (state "update") must start again.
func (s *Starter) settled(obj ctrlclient.Object) {
	for _, op := range []lifecycle.Operation{lifecycle.OpProvision, lifecycle.OpUpdate, lifecycle.OpBind} {
		s.memo().Remove(startedKey(obj, op))
	}
}

// delete carries out a "delete" that a client wrote into the status: the
// resource is deleted, and its finalizer runs the removal.
func (s *Starter) delete(ctx context.Context, obj ctrlclient.Object) error {
	err := s.Client.Delete(ctx, obj, ctrlclient.Preconditions{UID: ptr.To(obj.GetUID())})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s/%s, whose status asks for it: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// start starts op's workflow under the target's workflow ID, once per
// generation of the resource. While another run is under way (the workflow
// ID is the lock), nothing starts: the resource is looked at again shortly,
// when that run is done. While a run is in progress, a look is a cached
// read that starts nothing.
func (s *Starter) start(ctx context.Context, obj ctrlclient.Object, t lifecycle.Target, op lifecycle.Operation, attrs []temporal.SearchAttributeUpdate, text runText) (ctrl.Result, error) {
	key := startedKey(obj, op)
	if _, ok := s.memo().Get(key); ok {
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	if op.Removes() && s.Live != nil {
		// A removal ends by letting the resource go; a cache that has not
		// seen it go yet must not start the removal a second time.
		live := obj.DeepCopyObject().(ctrlclient.Object)
		err := s.Live.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), live)
		if apierrors.IsNotFound(err) || err == nil && live.GetUID() != obj.GetUID() {
			return ctrl.Result{}, nil // gone, or gone and made again
		}
	}
	s.engineBack(ctx, obj)
	id := runs.WorkflowID(t)
	opts := runs.OperationOptions(t, op, tenantOf(obj, s.Catalog), text.summary, attrs...)
	opts.StaticDetails = text.details
	opts.Priority.FairnessWeight = text.weight
	run, err := s.Temporal.ExecuteWorkflow(ctx, opts, runs.WorkflowType(op), t)
	var running *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &running) {
		s.adopt(ctx, key, id, op)
		log.FromContext(ctx).V(1).Info("a run is under way; looking again shortly", "workflowID", id, "operation", op)
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	if err != nil {
		s.notStarted(ctx, obj, op, err)
		return ctrl.Result{}, fmt.Errorf("starting %s of %s: %w", op, id, err)
	}
	s.memo().Add(key, run.GetRunID(), startedTTL)
	log.FromContext(ctx).V(1).Info("workflow started", "workflowID", id, "runID", run.GetRunID(), "operation", op)
	return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
}

func (s *Starter) addFinalizer(ctx context.Context, obj ctrlclient.Object, finalizer string) error {
	base := obj.DeepCopyObject().(ctrlclient.Object)
	if !controllerutil.AddFinalizer(obj, finalizer) {
		return nil
	}
	err := s.Client.Patch(ctx, obj, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		return errors.New("the resource changed while its finalizer was added; retrying")
	}
	return err
}

// tenantOf is the fairness key of an operation on obj (fairness.Of).
func tenantOf(obj ctrlclient.Object, catalog tenancy.Boundary) string {
	return fairness.Of(obj, catalog.Trusted(obj.GetNamespace()))
}

// protectByDefault gives a new instance of a plan with deletionProtection
// the annotation that protects it, unless its creator set the annotation
// (to "false", say) already.
func (s *Starter) protectByDefault(ctx context.Context, inst *osbv1alpha1.SFServiceInstance) error {
	if _, set := inst.Annotations[osbv1alpha1.DeletionProtectionAnnotation]; set {
		return nil
	}
	plans, err := s.plansWithID(ctx, inst.Spec.PlanID)
	if err != nil {
		return fmt.Errorf("reading the plan of %s/%s: %w", inst.Namespace, inst.Name, err)
	}
	// The plan the instance is served: the catalog's, or its own
	// namespace's (never another tenant's of the same ID).
	if !slices.ContainsFunc(plans, func(p osbv1alpha1.SFPlan) bool {
		return p.Spec.DeletionProtection && (s.Catalog.Trusted(p.Namespace) || p.Namespace == inst.Namespace)
	}) {
		return nil
	}
	base := inst.DeepCopy()
	metav1.SetMetaDataAnnotation(&inst.ObjectMeta, osbv1alpha1.DeletionProtectionAnnotation, "true")
	if err := s.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)); err != nil {
		return fmt.Errorf("protecting %s/%s from deletion, as its plan asks: %w", inst.Namespace, inst.Name, err)
	}
	return nil
}
