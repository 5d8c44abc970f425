package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/record"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/metrics"
)

// HealthChecks are the activities of the registered services' health-check
// loops. One pass checks the services of one shard that are due.
type HealthChecks struct {
	// Client writes, and reads what must be fresh (Secrets).
	Client ctrlclient.Client
	// Cache lists the services and their check Jobs and pods; nil reads
	// through Client.
	Cache ctrlclient.Reader
	// Events records each change of a service's state on it.
	Events record.EventRecorder
	// Minute is how long a check's minute is: time.Minute but in tests
	// and demos.
	Minute time.Duration
}

// Pass asks for one pass over a shard's services.
type Pass struct {
	Shard int `json:"shard"`
	// From and To bound the checks that are due: those whose instant falls
	// in (From, To]. A zero From checks only what Services names and the
	// services whose spec is new to the loop.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Services are namespace/name of services that changed: checked now.
	Services []string `json:"services,omitempty"`
}

// Passed is what a pass did, for the run's history.
type Passed struct {
	Services int `json:"services"`
	Checked  int `json:"checked"`
	// Running counts container checks whose Job has not ended.
	Running int `json:"running,omitempty"`
	// Changes says which services changed state, and why (the first
	// maxChanges; MoreChanges counts the rest).
	Changes     []string `json:"changes,omitempty"`
	MoreChanges int      `json:"moreChanges,omitempty"`
	// Tick is how long the loop waits before its next pass.
	Tick time.Duration `json:"tick"`
}

// finalizer holds a deleted service until its loop removed its Jobs.
const finalizer = "healthcheck.quartermaster.io/jobs"

// passConcurrency bounds the checks of one pass that run at once.
const passConcurrency = 64

// ShardField indexes the cached RegisteredServices by their shard
// (healthcheck.Shard, in decimal), so that a pass lists its own alone.
const ShardField = "healthcheck.shard"

// maxChanges bounds the changes a pass lists for the UI; the rest are
// counted.
const maxChanges = 100

// CheckServices runs one pass: it releases deleted services, checks the
// due ones, reads ended container checks, and writes each status that
// changed. A pass repeated with the same input does the same checks, and
// creates no second Job.
func (h *HealthChecks) CheckServices(ctx context.Context, p Pass) (Passed, error) {
	services, err := h.shard(ctx, p.Shard)
	if err != nil {
		return Passed{}, err
	}
	jobs, pods, err := h.checkObjects(ctx)
	if err != nil {
		return Passed{}, err
	}
	var (
		out  = Passed{Tick: h.tick(), Services: len(services)}
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, passConcurrency)
		wg   sync.WaitGroup
	)
	for _, svc := range services {
		due := h.due(p, svc)
		if !needsWork(svc, jobs[string(svc.UID)], due) {
			continue
		}
		// The listed service is the cache's own: work on a copy.
		svc := svc.DeepCopy()
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c := h.checkOne(ctx, p, svc, due, jobs[string(svc.UID)], pods)
			mu.Lock()
			defer mu.Unlock()
			if c.err != nil {
				errs = append(errs, fmt.Errorf("%s/%s: %w", svc.Namespace, svc.Name, c.err))
			}
			if c.checked {
				out.Checked++
			}
			if c.running {
				out.Running++
			}
			if c.change != "" {
				out.Changes = append(out.Changes, c.change)
			}
		})
	}
	wg.Wait()
	if out.Services == 0 {
		// An empty shard wakes rarely; a new service's signal wakes it.
		out.Tick = h.minute()
	}
	slices.Sort(out.Changes)
	if len(out.Changes) > maxChanges {
		out.MoreChanges, out.Changes = len(out.Changes)-maxChanges, out.Changes[:maxChanges]
	}
	return out, errors.Join(errs...)
}

// shard lists the services of one shard: from the cache's index, without
// copies (the caller copies what it changes), or from the API server.
func (h *HealthChecks) shard(ctx context.Context, shard int) ([]*primazav1alpha1.RegisteredService, error) {
	var list primazav1alpha1.RegisteredServiceList
	var err error
	if h.Cache != nil {
		err = h.Cache.List(ctx, &list, ctrlclient.MatchingFields{ShardField: strconv.Itoa(shard)}, ctrlclient.UnsafeDisableDeepCopy)
	} else {
		err = h.Client.List(ctx, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("listing RegisteredServices: %w", err)
	}
	out := make([]*primazav1alpha1.RegisteredService, 0, len(list.Items))
	for i := range list.Items {
		if svc := &list.Items[i]; healthcheck.Shard(svc.Namespace, svc.Name) == shard {
			out = append(out, svc)
		}
	}
	return out, nil
}

// due says whether a check of svc falls due in this pass: its spec is new
// to the loop, the watcher signalled it, or its instant fell in the
// pass's window.
func (h *HealthChecks) due(p Pass, svc *primazav1alpha1.RegisteredService) bool {
	hc := healthcheck.Of(svc)
	switch {
	case hc == nil:
		return false
	case svc.Status.ObservedGeneration != svc.Generation, slices.Contains(p.Services, svc.Namespace+"/"+svc.Name):
		return true
	}
	return !p.From.IsZero() && healthcheck.Due(string(svc.UID), healthcheck.Interval(hc, h.minute()), p.From, p.To)
}

// needsWork says whether a pass has anything to do for svc: most services
// of a pass are neither due nor changed, and cost no more than this.
func needsWork(svc *primazav1alpha1.RegisteredService, jobs []batchv1.Job, due bool) bool {
	switch {
	case due, !svc.DeletionTimestamp.IsZero(), svc.Status.ObservedGeneration != svc.Generation, len(jobs) > 0:
		return true
	case healthcheck.Of(svc) == nil:
		// A service whose check was removed keeps its old check status.
		return svc.Status.HealthCheck != nil
	}
	return false
}

// checked is what a pass did for one service.
type checked struct {
	checked, running bool
	change           string
	err              error
}

func (h *HealthChecks) checkOne(ctx context.Context, p Pass, svc *primazav1alpha1.RegisteredService, due bool, jobs []batchv1.Job, pods map[string][]corev1.Pod) checked {
	if !svc.DeletionTimestamp.IsZero() {
		return checked{err: h.release(ctx, svc, jobs)}
	}
	hc := healthcheck.Of(svc)
	if hc == nil || hc.Container == nil {
		// Jobs of a container check the spec no longer has.
		for i := range jobs {
			if err := h.deleteJob(ctx, &jobs[i]); err != nil {
				return checked{err: err}
			}
		}
	}
	switch {
	case hc == nil:
		return h.write(ctx, svc, healthcheck.Unchecked(svc))
	case hc.Container != nil:
		return h.containerCheck(ctx, p, svc, due, jobs, pods)
	case !due:
		return checked{}
	}
	probe, err := h.probe(ctx, svc, hc)
	if err != nil {
		return checked{err: err}
	}
	began := time.Now()
	r := probe.Run(ctx)
	metrics.HealthCheckRan(healthcheck.KindOf(hc), string(r.Outcome), time.Since(began))
	c := h.write(ctx, svc, healthcheck.Decide(svc, r, time.Now()))
	c.checked = true
	return c
}

// containerCheck reads the Jobs of ended checks, newest last, and deletes
// them; it starts a Job when a check is due and none runs.
func (h *HealthChecks) containerCheck(ctx context.Context, p Pass, svc *primazav1alpha1.RegisteredService, due bool, jobs []batchv1.Job, pods map[string][]corev1.Pod) checked {
	slices.SortFunc(jobs, func(a, b batchv1.Job) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	status, running := healthcheck.Unchecked(svc), false
	for i := range jobs {
		job := &jobs[i]
		if !job.DeletionTimestamp.IsZero() {
			continue
		}
		r, done := healthcheck.JobResult(job, pods[job.Namespace+"/"+job.Name])
		if !done {
			running = true
			continue
		}
		metrics.HealthCheckRan(healthcheck.KindContainer, string(r.Outcome), healthcheck.JobDuration(job))
		// The service's status so far decides, so that one pass that reads
		// two ended checks counts both.
		svc.Status = status
		status = healthcheck.Decide(svc, r, time.Now())
		if err := h.deleteJob(ctx, job); err != nil {
			return checked{err: err}
		}
	}
	c := h.write(ctx, svc, status)
	c.running = running
	if due && !running && c.err == nil {
		job := healthcheck.Job(svc, p.To.Truncate(time.Second))
		if err := h.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
			c.err = fmt.Errorf("creating the check's Job: %w", err)
		}
		c.checked, c.running = true, true
	}
	return c
}

// write patches svc's status to want and records the change of state, if
// any; for a container check, it adds the finalizer first. A status read from a stale cache loses
// the optimistic lock and waits for the next pass.
func (h *HealthChecks) write(ctx context.Context, svc *primazav1alpha1.RegisteredService, want primazav1alpha1.RegisteredServiceStatus) checked {
	if hc := healthcheck.Of(svc); hc != nil && hc.Container != nil && !controllerutil.ContainsFinalizer(svc, finalizer) {
		base := svc.DeepCopy()
		controllerutil.AddFinalizer(svc, finalizer)
		if err := h.Client.Patch(ctx, svc, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{})); err != nil {
			return checked{err: ignoreStale(fmt.Errorf("adding the finalizer: %w", err))}
		}
	}
	if equality.Semantic.DeepEqual(svc.Status, want) {
		return checked{}
	}
	before := svc.Status.State
	base := svc.DeepCopy()
	svc.Status = want
	if err := h.Client.Status().Patch(ctx, svc, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{})); err != nil {
		return checked{err: ignoreStale(fmt.Errorf("writing the status: %w", err))}
	}
	if before == want.State {
		return checked{}
	}
	message := ""
	if c := meta.FindStatusCondition(want.Conditions, healthcheck.ConditionHealthy); c != nil {
		message = c.Message
	}
	kind := corev1.EventTypeNormal
	if want.State == primazav1alpha1.ServiceUnreachable || want.State == primazav1alpha1.ServiceUnknown {
		kind = corev1.EventTypeWarning
	}
	if h.Events != nil {
		h.Events.Eventf(svc, kind, string(want.State), "%s → %s: %s", orNone(before), want.State, message)
	}
	return checked{change: fmt.Sprintf("%s/%s: %s → %s: %s", svc.Namespace, svc.Name, orNone(before), want.State, message)}
}

// release deletes a deleted service's check Jobs, then its finalizer.
func (h *HealthChecks) release(ctx context.Context, svc *primazav1alpha1.RegisteredService, jobs []batchv1.Job) error {
	if !controllerutil.ContainsFinalizer(svc, finalizer) {
		return nil
	}
	for i := range jobs {
		if err := h.deleteJob(ctx, &jobs[i]); err != nil {
			return err
		}
	}
	// The cache may not have seen a Job this loop created moments ago: ask
	// the API server before letting the service go.
	var left batchv1.JobList
	if err := h.Client.List(ctx, &left, ctrlclient.InNamespace(svc.Namespace), ctrlclient.MatchingLabels{healthcheck.LabelService: string(svc.UID)}); err != nil {
		return fmt.Errorf("listing the check's Jobs: %w", err)
	}
	for i := range left.Items {
		if err := h.deleteJob(ctx, &left.Items[i]); err != nil {
			return err
		}
	}
	base := svc.DeepCopy()
	controllerutil.RemoveFinalizer(svc, finalizer)
	if err := h.Client.Patch(ctx, svc, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{})); err != nil {
		return ignoreStale(ctrlclient.IgnoreNotFound(fmt.Errorf("releasing the finalizer: %w", err)))
	}
	return nil
}

func (h *HealthChecks) deleteJob(ctx context.Context, job *batchv1.Job) error {
	err := h.Client.Delete(ctx, job, ctrlclient.PropagationPolicy("Background"))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the check's Job %s: %w", job.Name, err)
	}
	return nil
}

func orNone(s primazav1alpha1.ServiceState) primazav1alpha1.ServiceState {
	if s == "" {
		return "(new)"
	}
	return s
}

// ignoreStale drops a conflict: the next pass reads the newer object.
func ignoreStale(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// checkObjects are the check Jobs by service UID, and their pods by
// namespace/Job name.
func (h *HealthChecks) checkObjects(ctx context.Context) (map[string][]batchv1.Job, map[string][]corev1.Pod, error) {
	has := ctrlclient.HasLabels{healthcheck.LabelService}
	var jobs batchv1.JobList
	if err := h.reader().List(ctx, &jobs, has); err != nil {
		return nil, nil, fmt.Errorf("listing the checks' Jobs: %w", err)
	}
	var pods corev1.PodList
	if err := h.reader().List(ctx, &pods, has); err != nil {
		return nil, nil, fmt.Errorf("listing the checks' pods: %w", err)
	}
	byService := map[string][]batchv1.Job{}
	for _, j := range jobs.Items {
		uid := j.Labels[healthcheck.LabelService]
		byService[uid] = append(byService[uid], j)
	}
	byJob := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if job := p.Labels[batchv1.JobNameLabel]; job != "" {
			byJob[p.Namespace+"/"+job] = append(byJob[p.Namespace+"/"+job], p)
		}
	}
	return byService, byJob, nil
}

func (h *HealthChecks) reader() ctrlclient.Reader {
	if h.Cache != nil {
		return h.Cache
	}
	return h.Client
}

func (h *HealthChecks) minute() time.Duration {
	if h.Minute > 0 {
		return h.Minute
	}
	return time.Minute
}

// tick is how often a loop passes over its services: often enough that a
// check runs within a twelfth of a minute of its instant, and that an
// ended container check is read as soon.
func (h *HealthChecks) tick() time.Duration {
	return min(5*time.Second, h.minute()/12)
}
