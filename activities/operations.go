package activities

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/template"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/catalog"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/render"
)

// Catalog finds the plan and service an instance names.
type Catalog interface {
	Plan(ctx context.Context, id string) (*osbv1alpha1.SFPlan, error)
	Service(ctx context.Context, id string) (*osbv1alpha1.SFService, error)
}

// Operations holds the activities of the provision, update, deprovision,
// bind and unbind workflows. Each is idempotent: it reads what it needs from
// the API server and writes with server-side apply, create-or-get or a
// status patch, so a retry after a crash at any point converges.
type Operations struct {
	// Client reads and writes the API server directly (no cache), so that
	// an operation never acts on a stale instance.
	Client  client.Client
	Catalog Catalog

	runsOnce sync.Once
	runs     *utilcache.LRUExpireCache
}

// The objects a workflow run has read or written are kept for the run's
// next steps, which then need no read of their own: the run works on the
// generation it began with. A worker that restarts reads them again.
const (
	runCacheSize = 10000
	runCacheTTL  = 10 * time.Minute
)

func (a *Operations) runCache() *utilcache.LRUExpireCache {
	a.runsOnce.Do(func() { a.runs = utilcache.NewLRUExpireCache(runCacheSize) })
	return a.runs
}

// runKey identifies the target within the current workflow run; it is empty
// outside an activity.
func runKey(ctx context.Context, tg Target) string {
	if !activity.IsActivity(ctx) {
		return ""
	}
	return activity.GetInfo(ctx).WorkflowExecution.RunID + "/" + string(tg.Kind) + "/" + tg.Namespace + "/" + tg.Name
}

// remember keeps copies of the target's objects for the run's next steps.
func (a *Operations) remember(ctx context.Context, t *target) {
	key := runKey(ctx, t.Target)
	if key == "" {
		return
	}
	c := &target{Target: t.Target, observed: t.observed}
	if t.instance != nil {
		c.instance = t.instance.DeepCopy()
	}
	if t.binding != nil {
		c.binding = t.binding.DeepCopy()
	}
	a.runCache().Add(key, c, runCacheTTL)
}

func (a *Operations) recalled(ctx context.Context, tg Target) *target {
	key := runKey(ctx, tg)
	if key == "" {
		return nil
	}
	v, ok := a.runCache().Get(key)
	if !ok {
		return nil
	}
	c := v.(*target)
	t := &target{Target: c.Target, observed: c.observed}
	if c.instance != nil {
		t.instance = c.instance.DeepCopy()
	}
	if c.binding != nil {
		t.binding = c.binding.DeepCopy()
	}
	return t
}

// target is an instance or binding, loaded with what its templates need.
type target struct {
	Target
	instance *osbv1alpha1.SFServiceInstance
	binding  *osbv1alpha1.SFServiceBinding // nil for instance operations
	plan     *osbv1alpha1.SFPlan
	service  *osbv1alpha1.SFService
	applied  bool   // the registry is known to exist
	observed string // what the status template said of the operation under way, before it was marked in progress
}

func (t *target) object() client.Object {
	if t.binding != nil {
		return t.binding
	}
	return t.instance
}

// resources returns what the target's templates applied so far.
func (t *target) resources() []osbv1alpha1.Source {
	if t.binding != nil {
		return t.binding.Status.Resources
	}
	return t.instance.Status.Resources
}

// Begin tells the workflow the generation it works on and how long it may
// poll, and marks a removal in progress.
func (a *Operations) Begin(ctx context.Context, tg Target, op Operation) (Begun, error) {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return Begun{}, err
	}
	if done(t, op) {
		return Begun{Done: true, Generation: t.object().GetGeneration()}, nil
	}
	if op == OpBind && (t.instance.Status.AppliedSpec == nil || t.instance.DeletionTimestamp != nil) {
		// Retried until the instance is provisioned, or the bind fails.
		return Begun{}, fmt.Errorf("instance %s/%s is not provisioned (state %q)", t.Namespace, t.instance.Name, t.instance.Status.State)
	}
	// A removal shows at once that it runs. Provision, update and bind
	// write "in progress" with what they applied (RecordResources), and only
	// if they have to wait: most finish in their first step, and one status
	// write fewer per operation is a fifth of their API server work.
	if op.Removes() {
		if err := a.patchStatus(ctx, t, inProgress(op)); err != nil {
			return Begun{}, err
		}
	}
	b := Begun{Generation: t.object().GetGeneration(), MaxPolling: DefaultMaxPolling}
	if p := t.plan.Spec.MaximumPollingDuration; p != nil {
		b.MaxPolling = time.Duration(*p) * time.Second
	}
	return b, nil
}

// done reports whether op already ran to its end for the target's current
// generation, so that a repeated start of the same operation changes nothing.
func done(t *target, op Operation) bool {
	if op.Removes() {
		return false
	}
	state, observed := t.instance.Status.State, t.instance.Status.ObservedGeneration
	if t.binding != nil {
		state, observed = t.binding.Status.State, t.binding.Status.ObservedGeneration
	}
	return state.Terminal() && observed == t.object().GetGeneration()
}

// ApplyTemplates renders the operation's template (provision for provision
// and update, bind, unbind) and applies the objects, owned by the target's
// registry. An update prunes what the plan no longer renders. Deprovision
// has no template. It returns the refs of what is applied now, which the
// workflow records in the status (RecordResources, Finish).
func (a *Operations) ApplyTemplates(ctx context.Context, tg Target, op Operation) ([]osbv1alpha1.Source, error) {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return nil, err
	}
	action := map[Operation]osbv1alpha1.TemplateAction{
		OpProvision: osbv1alpha1.ActionProvision, OpUpdate: osbv1alpha1.ActionProvision,
		OpBind: osbv1alpha1.ActionBind, OpUnbind: osbv1alpha1.ActionUnbind,
	}[op]
	if action == "" {
		return t.resources(), nil
	}
	reg, secret, err := a.registry(ctx, t)
	if err != nil {
		return nil, err
	}
	values, err := a.values(ctx, t, reg, op != OpProvision && op != OpUpdate)
	if err != nil {
		return nil, err
	}
	objs, err := a.render(ctx, t, action, values, reg)
	if err != nil {
		return nil, err
	}
	// Generated values are stored before anything that uses them exists, so
	// a retry renders the same password into the same objects.
	if err := a.saveRegistry(ctx, secret, reg); err != nil {
		return nil, err
	}
	owner := apply.Owner{Name: secret.Name, Namespace: secret.Namespace, UID: secret.UID}
	refs, err := apply.Objects(ctx, a.Client, owner, tg.Namespace, objs)
	if err != nil {
		return nil, classifyAPIError(err)
	}
	if op == OpUnbind {
		// The unbind template edits shared objects (e.g. removes a user);
		// it creates nothing that the binding owns afterwards.
		return t.resources(), nil
	}
	if op == OpUpdate {
		if err := apply.Prune(ctx, a.Client, owner, t.resources(), refs); err != nil {
			return nil, err
		}
	}
	return refs, nil
}

// RecordResources marks the operation in progress and lists what the
// templates applied in the status, before the operation waits for its
// status template: a user sees them while it waits.
func (a *Operations) RecordResources(ctx context.Context, tg Target, op Operation, refs []osbv1alpha1.Source) error {
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

// showProgress puts what the status template says of an operation under
// way into the status, so that kubectl and last_operation show it, and
// writes only when it changed. Until RecordResources has marked the
// operation in progress, it is kept for that write.
func (a *Operations) showProgress(ctx context.Context, t *target, description string) error {
	state, current := t.instance.Status.State, t.instance.Status.Description
	if t.binding != nil {
		state, current = t.binding.Status.State, t.binding.Status.Description
	}
	switch {
	case state != osbv1alpha1.StateInProgress:
		t.observed = description
		a.remember(ctx, t)
		return nil
	case current == description:
		return nil
	default:
		return a.patchStatus(ctx, t, func(s *status) { s.Description = description })
	}
}

// inProgress marks the operation as running.
func inProgress(op Operation) func(*status) {
	return func(s *status) {
		s.State = osbv1alpha1.StateInProgress
		s.Description = fmt.Sprintf("%s in progress", op)
		s.Error = ""
	}
}

// RemoveResources deletes what the target's templates applied: the first
// step of deprovision and the second of unbind.
func (a *Operations) RemoveResources(ctx context.Context, tg Target, op Operation) error {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return err
	}
	reg := &corev1.Secret{}
	err = a.Client.Get(ctx, client.ObjectKey{Namespace: tg.Namespace, Name: registryName(t)}, reg)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	owner := apply.Owner{Name: reg.Name, Namespace: reg.Namespace, UID: reg.UID}
	return apply.Delete(ctx, a.Client, owner, t.resources())
}

// Observe reads the sources and evaluates the status template for the
// operation. Without a status template, applying is success, and removal
// succeeds once every applied object is gone. A bind that succeeded stores
// its credentials here, so that they never travel through Temporal.
func (a *Operations) Observe(ctx context.Context, tg Target, op Operation) (Outcome, error) {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return Outcome{}, err
	}
	if planTemplate(t.plan, osbv1alpha1.ActionStatus) == nil {
		return a.defaultOutcome(ctx, t, op)
	}
	reg, regSecret, err := a.registry(ctx, t)
	if err != nil {
		return Outcome{}, err
	}
	values, err := a.values(ctx, t, reg, true)
	if err != nil {
		return Outcome{}, err
	}
	out, err := a.renderText(t, osbv1alpha1.ActionStatus, values, reg)
	if err != nil {
		return Outcome{}, err
	}
	statuses, err := render.Statuses(out)
	if err != nil {
		return Outcome{}, temporal.NewNonRetryableApplicationError("status template: "+err.Error(), ErrTemplate, nil)
	}
	st, ok := statuses[string(op)]
	if !ok && op == OpUpdate {
		st, ok = statuses[string(OpProvision)]
	}
	if !ok {
		return a.defaultOutcome(ctx, t, op)
	}
	o := Outcome{
		State:            osbv1alpha1.OperationState(st.State),
		Description:      st.Description,
		Error:            st.Error,
		DashboardURL:     st.DashboardURL,
		InstanceUsable:   st.InstanceUsable,
		UpdateRepeatable: st.UpdateRepeatable,
	}
	switch o.State {
	case osbv1alpha1.StateSucceeded, osbv1alpha1.StateFailed, osbv1alpha1.StateInProgress:
	default:
		return Outcome{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("status template: %s.state is %q; want succeeded, failed or in progress", op, st.State), ErrTemplate, nil)
	}
	if o.DashboardURL == "" {
		if v, _ := reg.Get(registry.KeyDashboardURL); v != nil {
			o.DashboardURL = fmt.Sprint(v)
		}
	}
	if op == OpBind && o.State == osbv1alpha1.StateSucceeded {
		if err := a.storeCredentials(ctx, t, reg, regSecret, st.Response); err != nil {
			return Outcome{}, err
		}
	}
	if o.State == osbv1alpha1.StateInProgress && o.Description != "" {
		if err := a.showProgress(ctx, t, o.Description); err != nil {
			return Outcome{}, err
		}
	}
	return o, nil
}

func (a *Operations) defaultOutcome(ctx context.Context, t *target, op Operation) (Outcome, error) {
	if !op.Removes() {
		if op == OpBind {
			reg, regSecret, err := a.registry(ctx, t)
			if err != nil {
				return Outcome{}, err
			}
			if err := a.storeCredentials(ctx, t, reg, regSecret, nil); err != nil {
				return Outcome{}, err
			}
		}
		return Outcome{State: osbv1alpha1.StateSucceeded}, nil
	}
	for _, ref := range t.resources() {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(ref.APIVersion)
		obj.SetKind(ref.Kind)
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, obj)
		if err == nil {
			return Outcome{State: osbv1alpha1.StateInProgress, Description: fmt.Sprintf("waiting for %s %s to go", ref.Kind, ref.Name)}, nil
		}
		if !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			return Outcome{}, err
		}
	}
	return Outcome{State: osbv1alpha1.StateSucceeded}, nil
}

// Finish writes the operation's final state and, when refs is not nil, what
// the templates applied. Success records the applied spec and generation; a removal that succeeded also deletes the registry
// and credentials and releases the finalizer, which lets the resource go.
func (a *Operations) Finish(ctx context.Context, tg Target, op Operation, generation int64, o Outcome, refs []osbv1alpha1.Source) error {
	if key := runKey(ctx, tg); key != "" {
		defer a.runCache().Remove(key)
	}
	t, err := a.loadObjects(ctx, tg, op)
	if errors.Is(err, errGone) {
		return nil // deleted meanwhile: no status to write
	}
	if err != nil {
		return err
	}
	if op.Removes() && o.State == osbv1alpha1.StateSucceeded {
		return a.release(ctx, t)
	}
	if generation == 0 {
		generation = t.object().GetGeneration()
	}
	return a.patchStatus(ctx, t, func(s *status) {
		s.State = o.State
		s.Description = o.Description
		s.Error = o.Error
		if o.DashboardURL != "" {
			s.DashboardURL = o.DashboardURL
		}
		s.InstanceUsable = o.InstanceUsable
		s.UpdateRepeatable = o.UpdateRepeatable
		s.ObservedGeneration = generation
		if refs != nil {
			s.Resources = refs
		}
		if o.State == osbv1alpha1.StateSucceeded {
			s.recordApplied()
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type:               "Ready",
			Status:             map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[o.State == osbv1alpha1.StateSucceeded],
			Reason:             conditionReason(op, o.State),
			Message:            o.Description,
			ObservedGeneration: generation,
		})
	})
}

func conditionReason(op Operation, s osbv1alpha1.OperationState) string {
	r := []rune(string(op))
	r[0] -= 'a' - 'A'
	switch s {
	case osbv1alpha1.StateSucceeded:
		return string(r) + "Succeeded"
	case osbv1alpha1.StateFailed:
		return string(r) + "Failed"
	default:
		return string(r) + "InProgress"
	}
}

// release deletes the registry and the credentials Secret and removes the
// finalizer.
func (a *Operations) release(ctx context.Context, t *target) error {
	names := []string{registryName(t)}
	if t.binding != nil {
		names = append(names, credentialsName(t.binding))
	}
	for _, name := range names {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: name}}
		if err := a.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Secret %s/%s: %w", t.Namespace, name, err)
		}
	}
	obj := t.object()
	base := obj.DeepCopyObject().(client.Object)
	finalizer := osbv1alpha1.InstanceFinalizer
	if t.binding != nil {
		finalizer = osbv1alpha1.BindingFinalizer
	}
	if !controllerutil.RemoveFinalizer(obj, finalizer) {
		return nil
	}
	err := a.Client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// errGone marks a target deleted while its operation ran.
var errGone = errors.New("gone")

// load reads the target, its instance, plan and service.
func (a *Operations) load(ctx context.Context, tg Target, op Operation) (*target, error) {
	t, err := a.loadObjects(ctx, tg, op)
	if err != nil {
		return nil, err
	}
	planID := ""
	if t.binding != nil {
		planID = t.binding.Spec.PlanID
	} else {
		planID = t.instance.Spec.PlanID
	}
	if t.plan, err = a.Catalog.Plan(ctx, planID); err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("unknown plan %q: no SFPlan has this spec.id", planID), ErrPlan, nil)
		}
		return nil, err
	}
	if t.service, err = a.Catalog.Service(ctx, t.plan.Spec.ServiceID); err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("plan %q belongs to service %q, which no SFService has as spec.id", planID, t.plan.Spec.ServiceID), ErrPlan, nil)
		}
		return nil, err
	}
	return t, nil
}

// loadObjects reads the target and its instance, without the catalog: what
// writing a status needs, even for an instance whose plan is unknown.
func (a *Operations) loadObjects(ctx context.Context, tg Target, op Operation) (*target, error) {
	if t := a.recalled(ctx, tg); t != nil {
		return t, nil
	}
	t := &target{Target: tg}
	key := client.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}
	instKey := key
	if tg.Kind == KindBinding {
		t.binding = &osbv1alpha1.SFServiceBinding{}
		if err := a.Client.Get(ctx, key, t.binding); err != nil {
			return nil, gone(err, tg)
		}
		instKey.Name = t.binding.Spec.InstanceID
	}
	t.instance = &osbv1alpha1.SFServiceInstance{}
	err := a.Client.Get(ctx, instKey, t.instance)
	switch {
	case err == nil:
	case tg.Kind == KindBinding && apierrors.IsNotFound(err) && op == OpUnbind:
		t.instance = nil // unbinding from an instance already gone
	case tg.Kind == KindBinding && apierrors.IsNotFound(err):
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("instance %s/%s of the binding does not exist", instKey.Namespace, instKey.Name), ErrGone, err)
	default:
		return nil, gone(err, tg)
	}
	a.remember(ctx, t)
	return t, nil
}

// gone turns a NotFound of the target into a non-retryable ErrGone: the
// resource was deleted while its operation ran, and there is nothing left
// to do.
func gone(err error, tg Target) error {
	if apierrors.IsNotFound(err) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s %s/%s no longer exists", tg.Kind, tg.Namespace, tg.Name), ErrGone, errGone)
	}
	return err
}

// registryName is the name of a target's registry Secret.
func registryName(t *target) string {
	if t.binding != nil {
		return boundedName("qm-binding-", t.binding.Name)
	}
	return boundedName("qm-instance-", t.instance.Name)
}

// credentialsName is the Secret that holds a binding's credentials.
func credentialsName(b *osbv1alpha1.SFServiceBinding) string {
	return boundedName("qm-credentials-", b.Name)
}

// boundedName keeps a derived name within the 253 characters of a Secret name.
func boundedName(prefix, name string) string {
	if len(prefix)+len(name) <= 253 {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(sum[:])
}

// registry returns the target's registry and its Secret, creating both on
// first use. A binding registry inherits the instance's keys when created.
func (a *Operations) registry(ctx context.Context, t *target) (*registry.Registry, *corev1.Secret, error) {
	kind := registry.Instance
	readOnly := map[string]string{
		registry.KeyNamespace: t.Namespace,
		registry.KeyServiceID: t.plan.Spec.ServiceID,
		registry.KeyPlanID:    t.plan.Spec.ID,
	}
	switch {
	case t.instance != nil && t.instance.Spec.InstanceID != "":
		readOnly[registry.KeyInstanceID] = t.instance.Spec.InstanceID
	case t.instance != nil:
		readOnly[registry.KeyInstanceID] = t.instance.Name
	default:
		readOnly[registry.KeyInstanceID] = t.binding.Spec.InstanceID
	}
	if t.binding != nil {
		kind = registry.Binding
		readOnly[registry.KeyBindingID] = t.binding.Spec.ID
	}
	// A target that never applied anything has no registry yet: try to
	// create it straight away, and read it only if that fails.
	if !fresh(t) {
		secret := &corev1.Secret{}
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: registryName(t)}, secret)
		if err == nil {
			reg, err := registry.Decode(kind, secret.Data)
			return reg, secret, err
		}
		if !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
	}
	reg := registry.New(kind, readOnly)
	if t.binding != nil && t.instance != nil {
		inst, _, err := a.registry(ctx, &target{Target: Target{Kind: KindInstance, Namespace: t.Namespace, Name: t.instance.Name}, instance: t.instance, plan: t.plan, service: t.service})
		if err != nil {
			return nil, nil, err
		}
		reg.Inherit(inst)
	}
	data, err := reg.Encode()
	if err != nil {
		return nil, nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      registryName(t),
			Namespace: t.Namespace,
			Labels:    map[string]string{"quartermaster.io/registry": string(kind), "quartermaster.io/" + string(kind): t.Name},
		},
		Type: registry.SecretType,
		Data: data,
	}
	if err := a.Client.Create(ctx, secret); err != nil {
		if apierrors.IsAlreadyExists(err) && fresh(t) {
			t.applied = true // an earlier attempt created it: read it
			return a.registry(ctx, t)
		}
		return nil, nil, fmt.Errorf("creating registry Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	reg, err = registry.Decode(kind, data) // as stored: nothing left to save
	return reg, secret, err
}

// fresh reports whether the target has never applied anything, so that its
// registry most likely does not exist yet.
func fresh(t *target) bool {
	if t.applied {
		return false
	}
	if t.binding != nil {
		return t.binding.Status.AppliedSpec == nil && len(t.binding.Status.Resources) == 0
	}
	return t.instance.Status.AppliedSpec == nil && len(t.instance.Status.Resources) == 0
}

func (a *Operations) saveRegistry(ctx context.Context, secret *corev1.Secret, reg *registry.Registry) error {
	if !reg.Changed() {
		return nil
	}
	data, err := reg.Encode()
	if err != nil {
		return err
	}
	secret.Data = data
	if err := a.Client.Update(ctx, secret); err != nil {
		return fmt.Errorf("saving registry Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return nil
}

// storeCredentials keeps a binding's credentials in its registry and in the
// Secret that status.response.secretRef names.
func (a *Operations) storeCredentials(ctx context.Context, t *target, reg *registry.Registry, regSecret *corev1.Secret, response map[string]any) error {
	creds, _ := response["credentials"].(map[string]any)
	if creds == nil {
		if v, _ := reg.Get(registry.KeyCredentials); v != nil {
			creds, _ = v.(map[string]any)
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentialsName(t.binding), Namespace: t.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, a.Client, secret, func() error {
		secret.Labels = map[string]string{"quartermaster.io/binding": t.binding.Name}
		secret.Data = map[string][]byte{}
		var jsonKeys []string
		for k, v := range creds {
			if s, ok := v.(string); ok {
				secret.Data[k] = []byte(s)
			} else {
				secret.Data[k] = []byte(mustJSON(v))
				jsonKeys = append(jsonKeys, k)
			}
		}
		// The OSB API gives the credentials back with their JSON types:
		// it needs to know which values are JSON rather than strings.
		slices.Sort(jsonKeys)
		if len(jsonKeys) > 0 {
			secret.Annotations = map[string]string{CredentialsJSONKeysAnnotation: strings.Join(jsonKeys, ",")}
		} else {
			delete(secret.Annotations, CredentialsJSONKeysAnnotation)
		}
		return controllerutil.SetOwnerReference(t.binding, secret, a.Client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("writing the credentials Secret %s/%s: %w", t.Namespace, secret.Name, err)
	}
	if creds != nil {
		if err := reg.Set(registry.KeyCredentials, creds); err != nil {
			return err
		}
		if err := a.saveRegistry(ctx, regSecret, reg); err != nil {
			return err
		}
	}
	return a.patchStatus(ctx, t, func(s *status) { s.SecretRef = secret.Name })
}

// values builds the template variables. withSources adds every object the
// sources template names, as the API server returns it.
func (a *Operations) values(ctx context.Context, t *target, reg *registry.Registry, withSources bool) (render.Values, error) {
	v := render.Values{
		"service":  toMap(a.Client.Scheme(), t.service),
		"plan":     toMap(a.Client.Scheme(), t.plan),
		"registry": reg.Values(),
	}
	if t.instance != nil {
		v["instance"] = toMap(a.Client.Scheme(), t.instance)
	}
	if t.binding != nil {
		v["binding"] = toMap(a.Client.Scheme(), t.binding)
	}
	if !withSources || planTemplate(t.plan, osbv1alpha1.ActionSources) == nil {
		return v, nil
	}
	out, err := a.renderText(t, osbv1alpha1.ActionSources, v, reg)
	if err != nil {
		return nil, err
	}
	sources, err := render.Sources(out)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTemplate, nil)
	}
	for _, key := range slices.Sorted(maps.Keys(sources)) {
		src := sources[key]
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(src.APIVersion)
		obj.SetKind(src.Kind)
		ns := src.Namespace
		if ns == "" {
			ns = t.Namespace
		}
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: src.Name}, obj)
		switch {
		case err == nil:
			v[key] = obj.Object
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
			// Absent sources are absent variables: templates test with `with`.
		default:
			return nil, fmt.Errorf("reading source %q (%s %s): %w", key, src.Kind, src.Name, err)
		}
	}
	return v, nil
}

// render renders the template for action into objects.
func (a *Operations) render(ctx context.Context, t *target, action osbv1alpha1.TemplateAction, values render.Values, reg *registry.Registry) ([]*unstructured.Unstructured, error) {
	tmpl := planTemplate(t.plan, action)
	if tmpl == nil {
		return nil, nil
	}
	if tmpl.Type == osbv1alpha1.TemplateHelm {
		return a.renderHelm(ctx, t, tmpl, values)
	}
	out, err := a.renderText(t, action, values, reg)
	if err != nil {
		return nil, err
	}
	objs, err := render.Objects(out)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s template: %v", action, err), ErrTemplate, nil)
	}
	return objs, nil
}

func (a *Operations) renderHelm(_ context.Context, t *target, tmpl *osbv1alpha1.TemplateSpec, values render.Values) ([]*unstructured.Unstructured, error) {
	fail := func(err error) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s template: %v", tmpl.Action, err), ErrTemplate, nil)
	}
	var archive []byte
	var err error
	switch {
	case tmpl.ContentEncoded != "":
		if archive, err = base64.StdEncoding.DecodeString(tmpl.ContentEncoded); err != nil {
			return nil, fail(fmt.Errorf("contentEncoded is not base64: %w", err))
		}
	case tmpl.URL != "":
		// A fetch can fail for a while and then work: retried.
		if archive, err = render.FetchChart(tmpl.URL); err != nil {
			return nil, err
		}
	default:
		return nil, fail(errors.New("a helm template needs url or contentEncoded"))
	}
	ch, err := render.LoadChart(archive)
	if err != nil {
		return nil, fail(err)
	}
	chartValues := map[string]any{}
	mergeJSON(chartValues, t.plan.Spec.Context)
	if t.binding != nil {
		mergeJSON(chartValues, t.binding.Spec.Parameters)
	} else {
		mergeJSON(chartValues, t.instance.Spec.Parameters)
	}
	upgrade := t.binding == nil && t.instance.Status.AppliedSpec != nil
	objs, err := render.Helm(ch, render.Release{Name: t.Name, Namespace: t.Namespace, Upgrade: upgrade}, chartValues, values)
	if err != nil {
		return nil, fail(err)
	}
	return objs, nil
}

// renderText renders a gotemplate template to text.
func (a *Operations) renderText(t *target, action osbv1alpha1.TemplateAction, values render.Values, reg *registry.Registry) (string, error) {
	tmpl := planTemplate(t.plan, action)
	content := tmpl.Content
	if content == "" && tmpl.ContentEncoded != "" {
		raw, err := base64.StdEncoding.DecodeString(tmpl.ContentEncoded)
		if err != nil {
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s template: contentEncoded is not base64: %v", action, err), ErrTemplate, nil)
		}
		content = string(raw)
	}
	if tmpl.URL != "" && content == "" {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s template: gotemplate templates fetched from a url are not supported; give content", action), ErrTemplate, nil)
	}
	out, err := render.Go(string(action), content, values, funcs(reg))
	if err != nil {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s template: %v", action, err), ErrTemplate, nil)
	}
	return out, nil
}

func funcs(reg *registry.Registry) template.FuncMap {
	f := render.FuncMap()
	maps.Copy(f, reg.Funcs())
	return f
}

// planTemplate returns the plan's template for action, or nil.
func planTemplate(p *osbv1alpha1.SFPlan, action osbv1alpha1.TemplateAction) *osbv1alpha1.TemplateSpec {
	for i := range p.Spec.Templates {
		if p.Spec.Templates[i].Action == action {
			return &p.Spec.Templates[i]
		}
	}
	return nil
}

// classifyAPIError makes the API server's refusals of a rendered object
// non-retryable: the same object will be refused again.
func classifyAPIError(err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || meta.IsNoMatchError(err) || apierrors.IsForbidden(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrApply, nil)
	}
	return err
}

// toMap converts a typed object to the map a template sees, with its
// apiVersion and kind.
func toMap(scheme *runtime.Scheme, obj client.Object) map[string]any {
	obj = obj.DeepCopyObject().(client.Object)
	if gvks, _, err := scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	obj.SetManagedFields(nil)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil
	}
	return m
}
