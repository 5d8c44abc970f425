package testenv

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/deploy/samples"
	"github.com/quartermaster/qm/internal/devserver"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/starter"
)

// The IDs of the samples that `qm dev` installs, and a System with
// Parts.Sample.
const (
	TenantService   = "6f3c1f8e-4c5e-4a55-9b53-6f1d2b7a9c01"
	TenantPlan      = "0a7b4a4e-2d0e-4f3e-8a53-3e1f0c7d5b11"
	KeyValueService = "3d7c2b9a-8f1e-4b6d-9c3a-5e2f1a0b7c42"
	KeyValuePlan    = "8a1e4c6f-2b3d-4e5f-9a7b-1c2d3e4f5a61"
)

// Credentials of the API a System serves.
var (
	OSBCredentials   = api.Credentials{Username: "platform", Password: "s3cr3t-pw"}
	AdminCredentials = api.Credentials{Username: "operator", Password: "admin-pw"}
)

//go:embed testdata/templates/*.yaml
var templates embed.FS

// Templates returns the plan templates of testdata/templates/<name>.yaml,
// as the `templates:` list of an SFPlan's spec.
func Templates(name string) string {
	raw, err := templates.ReadFile("testdata/templates/" + name + ".yaml")
	if err != nil {
		panic(fmt.Sprintf("testenv: no templates %q: %v", name, err))
	}
	return string(raw)
}

// Parts says which of Quartermaster's components a System runs.
type Parts struct {
	// Worker runs a Temporal worker; Watcher the watcher; API the OSB and
	// admin API for the System's namespace.
	Worker, Watcher, API bool
	// Concurrency is the watcher's reconciles at once per kind (0: its default).
	Concurrency int
	// ClusterProbePeriod is how often the watcher probes SFClusters (0: its default).
	ClusterProbePeriod time.Duration
	// FileTemporal gives the System a dev server of its own with SQLite in a
	// file, as `qm dev` runs it, for benchmarks whose figures should be
	// those of the embedded default. Otherwise it shares the test binary's.
	FileTemporal bool
	// Namespace, when set, is the System's namespace, and no service is
	// registered in it; otherwise the System gets a new namespace with a
	// service of its own.
	Namespace string
	// ServiceID names the service of the plans Plan registers, with Namespace.
	ServiceID string
	// SyncTimeout and BindTimeout are the API's (default 20 s each).
	SyncTimeout, BindTimeout time.Duration
	// APILogger receives the API's request log (default: the test's output).
	APILogger *slog.Logger
	// Bare runs the System on BareKubernetes, the API server alone,
	// instead of the full cluster.
	Bare bool
	// HealthCheckMinute is the length of a health check's minute for the
	// worker (default: a minute).
	HealthCheckMinute time.Duration
	// Sample installs the samples of `qm dev` first (TenantService,
	// TenantPlan, KeyValueService, KeyValuePlan).
	Sample bool
	// Scheduler is the worker's (default: the one cluster).
	Scheduler scheduling.Scheduler
	// SuggestContinueAsNewAt gives the System a dev server of its own on
	// which Temporal suggests continue-as-new to every run whose history
	// has this many events, as it does at 4,096 events in production. It is
	// the one way tests make a long-running workflow continue as new on the
	// real server (the Temporal test suite's is SetContinueAsNewSuggested).
	SuggestContinueAsNewAt int
}

// System is Quartermaster running on the shared API server and dev server,
// wired as `qm dev` wires it (internal/system), in a namespace of the
// test's own. The worker runs apart from the rest, so that a test can stop
// it and start another.
type System struct {
	t         testing.TB
	Kube      *Cluster
	Temporal  client.Client
	Namespace string
	// ServiceID is the OSB service_id of the namespace's service: the
	// service of every plan that Plan registers.
	ServiceID string
	// API is the API server, and URL where it serves, when Parts.API is set.
	API *api.Server
	URL string

	worker, rest *system.System
	restOptions  system.Options
	minute       time.Duration
	scheduler    scheduling.Scheduler
}

// Start runs the parts of Quartermaster that parts names until the test ends.
func Start(t testing.TB, parts Parts) *System {
	t.Helper()
	s := &System{t: t, Namespace: parts.Namespace, ServiceID: parts.ServiceID, minute: parts.HealthCheckMinute, scheduler: parts.Scheduler}
	if parts.Bare {
		s.Kube = BareKubernetes(t)
	} else {
		s.Kube = Kubernetes(t)
	}
	switch {
	case parts.FileTemporal:
		s.Temporal = FileTemporal(t)
	case parts.SuggestContinueAsNewAt > 0:
		s.Temporal = ownTemporal(t, devserver.Options{DynamicConfig: map[string]string{
			"limit.historyCount.suggestContinueAsNew": strconv.Itoa(parts.SuggestContinueAsNewAt)}})
	case parts.Worker || parts.Watcher:
		s.Temporal = Temporal(t)
	}
	if s.Namespace == "" {
		s.Namespace = s.Kube.Namespace(t)
		s.ServiceID = s.Namespace + "-svc"
		s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFService
metadata: {name: svc, namespace: %s}
spec:
  name: %s
  id: %s
  description: a service of the test
  bindable: true
  instancesRetrievable: true
  bindingsRetrievable: true
  planUpdatable: true`, s.Namespace, s.Namespace, s.ServiceID))
	}
	if parts.Sample {
		s.installSample()
	}
	if parts.Worker {
		s.StartWorker()
	}
	o := system.Options{Kube: s.Kube.Config, Temporal: s.Temporal}
	if parts.Watcher {
		o.Watcher = &starter.WatcherOptions{Concurrency: parts.Concurrency, ClusterProbePeriod: parts.ClusterProbePeriod}
	}
	if parts.API {
		logger := parts.APILogger
		if logger == nil {
			logger = slog.New(slog.NewTextHandler(t.Output(), nil))
		}
		s.API = &api.Server{Namespace: s.Namespace, OSB: OSBCredentials, Admin: AdminCredentials,
			SyncTimeout: cmp.Or(parts.SyncTimeout, 20*time.Second), BindTimeout: cmp.Or(parts.BindTimeout, 20*time.Second), Logger: logger}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		o.API, o.APIListener = s.API, ln
		s.URL = "http://" + ln.Addr().String()
	}
	if o.Watcher != nil || o.API != nil {
		s.restOptions = o
		s.rest = s.run(o)
	}
	return s
}

// Over returns a System of no components of its own over a cluster the
// test started itself (the chaos run's), for the helpers that register
// services and plans.
func Over(t testing.TB, kube *Cluster, namespace, serviceID string) *System {
	return &System{t: t, Kube: kube, Namespace: namespace, ServiceID: serviceID}
}

// run starts components until the test ends; the test fails if one of them
// stops with an error.
func (s *System) run(o system.Options) *system.System {
	s.t.Helper()
	sys, err := system.Start(context.Background(), o)
	require.NoError(s.t, err, "starting Quartermaster")
	s.t.Cleanup(func() {
		if err := sys.Stop(); err != nil {
			s.t.Errorf("Quartermaster stopped: %v", err)
		}
	})
	return sys
}

// StartWorker starts a worker, with a Kubernetes client of its own as
// `qm worker` has.
func (s *System) StartWorker() {
	s.t.Helper()
	s.worker = s.run(system.Options{Kube: s.Kube.Config, Temporal: s.Temporal, Worker: true, HealthCheckMinute: s.minute, Scheduler: s.scheduler})
}

// StartAnotherWorker starts one more worker beside the System's, on the
// same task queue, with state of its own (caches, scheduling turns) as a
// second replica of `qm worker` has; it stops when the test ends.
func (s *System) StartAnotherWorker() {
	s.t.Helper()
	s.run(system.Options{Kube: s.Kube.Config, Temporal: s.Temporal, Worker: true, HealthCheckMinute: s.minute, Scheduler: s.scheduler})
}

// RestartWatcher stops the watcher (and the API, if the System has it) and
// starts them again, as a new process would.
func (s *System) RestartWatcher() {
	s.t.Helper()
	require.NoError(s.t, s.rest.Stop())
	s.rest = s.run(s.restOptions)
}

// StopWorker stops the worker: nothing moves until StartWorker.
func (s *System) StopWorker() {
	s.t.Helper()
	require.NoError(s.t, s.worker.Stop())
}

// Plan registers an SFPlan of the System's service, named name with the ID
// <namespace>-<name>; extra is YAML added to its spec (a
// maximum_polling_duration of 120 s unless it sets one), templates its
// `templates:` list (see Templates). It returns once every running
// component sees the plan.
func (s *System) Plan(name, extra, templates string) string {
	s.t.Helper()
	id := s.Namespace + "-" + name
	if !strings.Contains(extra, "maximum_polling_duration:") {
		extra = "  maximum_polling_duration: 120\n" + extra
	}
	s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: %s, namespace: %s}
spec:
  name: %s
  id: %s
  description: a plan of the test
  serviceId: %s
%s
  templates:
%s`, name, s.Namespace, name, id, s.ServiceID, extra, templates))
	s.WaitPlanGeneration(id, 1)
	return id
}

// WaitPlanGeneration waits until every running component sees generation
// gen (or a later one) of the plan planID.
func (s *System) WaitPlanGeneration(planID string, gen int64) {
	s.t.Helper()
	for _, sys := range []*system.System{s.worker, s.rest} {
		if sys == nil || sys.Offerings == nil {
			continue
		}
		require.Eventually(s.t, func() bool {
			p, err := sys.Offerings.Plan(context.Background(), planID)
			return err == nil && p.Generation >= gen
		}, 10*time.Second, 20*time.Millisecond, "Quartermaster sees generation %d of plan %s", gen, planID)
	}
}

// Create creates the object a YAML or JSON manifest describes.
func (s *System) Create(manifest string) *unstructured.Unstructured {
	s.t.Helper()
	obj, err := s.TryCreate(manifest)
	require.NoError(s.t, err)
	return obj
}

// TryCreate is Create returning its error, for goroutines where the test
// cannot be stopped.
func (s *System) TryCreate(manifest string) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&obj.Object); err != nil {
		return nil, fmt.Errorf("decoding the manifest: %w", err)
	}
	if err := s.Kube.Client.Create(context.Background(), obj); err != nil {
		return nil, fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return obj, nil
}

// Decode reads a YAML or JSON manifest into an object.
func Decode(t testing.TB, manifest string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&obj.Object))
	return obj
}

var installSample sync.Once

// installSample installs the samples of `qm dev` in the namespace
// "default", once per test binary.
func (s *System) installSample() {
	s.t.Helper()
	installSample.Do(func() {
		require.NoError(s.t, samples.Install(context.Background(), s.Kube.Client, "default", "test"))
	})
}

// Instance creates an SFServiceInstance of the plan in the System's
// namespace, as kubectl would; parameters is JSON or empty.
func (s *System) Instance(name, planID, parameters string) *osbv1alpha1.SFServiceInstance {
	s.t.Helper()
	inst, err := s.CreateInstance(name, planID, parameters)
	require.NoError(s.t, err)
	return inst
}

// CreateInstance is Instance returning its error, for goroutines (such as
// Parallel's) where the test cannot be stopped.
func (s *System) CreateInstance(name, planID, parameters string) (*osbv1alpha1.SFServiceInstance, error) {
	inst := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: name, ServiceID: s.serviceOf(planID), PlanID: planID},
	}
	if parameters != "" {
		inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(parameters)}
	}
	if err := s.Kube.Client.Create(context.Background(), inst); err != nil {
		return nil, fmt.Errorf("creating instance %s: %w", name, err)
	}
	return inst, nil
}

// serviceOf is the service of a plan that Plan registered, or of the sample.
func (s *System) serviceOf(planID string) string {
	switch planID {
	case TenantPlan:
		return TenantService
	case KeyValuePlan:
		return KeyValueService
	}
	return s.ServiceID
}

// Bind creates an SFServiceBinding of the instance named instance, as
// kubectl would, waits until its bind succeeded, and returns it.
func (s *System) Bind(name, instance, planID string) *osbv1alpha1.SFServiceBinding {
	s.t.Helper()
	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec:       osbv1alpha1.SFServiceBindingSpec{ID: name, InstanceID: instance, ServiceID: s.serviceOf(planID), PlanID: planID},
	}
	ctx := context.Background()
	require.NoError(s.t, s.Kube.Client.Create(ctx, b))
	require.EventuallyWithT(s.t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b))
		assert.Equal(c, osbv1alpha1.StateSucceeded, b.Status.State)
	}, 60*time.Second, 50*time.Millisecond, "binding %s succeeds", name)
	return b
}

// WaitInstance waits until the instance satisfies cond, and returns it.
func (s *System) WaitInstance(name, what string, cond func(*osbv1alpha1.SFServiceInstance) bool) *osbv1alpha1.SFServiceInstance {
	s.t.Helper()
	var inst osbv1alpha1.SFServiceInstance
	var last string
	ok := assert.Eventually(s.t, func() bool {
		if err := s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &inst); err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("state %q, description %q, generation %d, observed %d", inst.Status.State, inst.Status.Description, inst.Generation, inst.Status.ObservedGeneration)
		return cond(&inst)
	}, 90*time.Second, 50*time.Millisecond, "instance %s: %s", name, what)
	if !ok {
		s.t.Fatalf("instance %s never reached %s; last seen: %s", name, what, last)
	}
	return &inst
}

// Succeeded is the condition of an instance whose operation on generation
// gen succeeded.
func Succeeded(gen int64) func(*osbv1alpha1.SFServiceInstance) bool {
	return func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateSucceeded && i.Status.ObservedGeneration == gen
	}
}

// WaitGone waits until obj is deleted.
func (s *System) WaitGone(obj ctrlclient.Object) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		return apierrors.IsNotFound(s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKeyFromObject(obj), obj))
	}, 90*time.Second, 50*time.Millisecond, "%T %s is deleted", obj, obj.GetName())
}

// RegistryValue reads one key of a registry Secret in the System's
// namespace, decoded from JSON.
func (s *System) RegistryValue(secretName, key string) any {
	s.t.Helper()
	var sec corev1.Secret
	require.NoError(s.t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: secretName}, &sec))
	var v any
	require.NoError(s.t, json.Unmarshal(sec.Data[key], &v), "registry key %s", key)
	return v
}

// Runs counts the workflow runs stored under a workflow ID, as Temporal's
// visibility has them now; a failed list is reported on t, the test or an
// Eventually condition's *assert.CollectT.
func (s *System) Runs(t require.TestingT, workflowID string) int {
	resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", workflowID),
	})
	require.NoError(t, err, "listing the runs of %s", workflowID)
	return len(resp.Executions)
}
