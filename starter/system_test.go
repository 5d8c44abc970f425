package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/deploy/samples"
	"github.com/quartermaster/qm/internal/catalog"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Plan IDs of the tenant-namespace sample.
const (
	tenantService = "6f3c1f8e-4c5e-4a55-9b53-6f1d2b7a9c01"
	tenantPlan    = "0a7b4a4e-2d0e-4f3e-8a53-3e1f0c7d5b11"
)

// system is Quartermaster running against the shared API server and dev
// server: a worker and, unless a test drives the starter itself, a watcher.
type system struct {
	t       *testing.T
	kube    *testenv.Cluster
	tc      client.Client
	catalog *catalog.Catalog
	ns      string
	worker  sdkworker.Worker
}

var installSamples sync.Once

func start(t *testing.T, withWatcher bool) *system {
	t.Helper()
	kube := testenv.Kubernetes(t)
	tc := testenv.Temporal(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	installSamples.Do(func() {
		objs, err := samples.TenantNamespace()
		require.NoError(t, err)
		for _, obj := range objs {
			obj.SetNamespace("default")
			require.NoError(t, kube.Client.Patch(ctx, obj, ctrlclient.Apply, ctrlclient.FieldOwner("test"), ctrlclient.ForceOwnership))
		}
	})

	cat := testenv.Catalog(t, kube.Config)
	s := &system{t: t, kube: kube, tc: tc, catalog: cat, ns: kube.Namespace(t)}
	s.startWorker()
	if withWatcher {
		testenv.Watch(t, kube.Config, tc, starter.WatcherOptions{})
	}
	return s
}

func (s *system) startWorker() {
	s.worker = worker.New(s.tc, s.kube.Client, s.catalog)
	require.NoError(s.t, s.worker.Start())
	w := s.worker
	s.t.Cleanup(w.Stop)
}

// plan registers an SFPlan of the tenant service in the test's namespace.
func (s *system) plan(name, templates string) string {
	s.t.Helper()
	id := s.ns + "-" + name
	obj := decode(s.t, fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: %s, namespace: %s}
spec:
  name: %s
  id: %s
  description: a test plan
  serviceId: %s
  maximum_polling_duration: 120
  templates:
%s`, name, s.ns, name, id, tenantService, templates))
	require.NoError(s.t, s.kube.Client.Create(context.Background(), obj))
	require.Eventually(s.t, func() bool {
		_, err := s.catalog.Plan(context.Background(), id)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the catalog sees the plan")
	return id
}

func (s *system) instance(name, planID, parameters string) *osbv1alpha1.SFServiceInstance {
	s.t.Helper()
	inst := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: name, ServiceID: tenantService, PlanID: planID},
	}
	if parameters != "" {
		inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(parameters)}
	}
	require.NoError(s.t, s.kube.Client.Create(context.Background(), inst))
	return inst
}

// waitInstance waits until the instance satisfies cond and returns it.
func (s *system) waitInstance(name string, what string, cond func(*osbv1alpha1.SFServiceInstance) bool) *osbv1alpha1.SFServiceInstance {
	s.t.Helper()
	var inst osbv1alpha1.SFServiceInstance
	var last string
	ok := assert.Eventually(s.t, func() bool {
		if err := s.kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.ns, Name: name}, &inst); err != nil {
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

func (s *system) waitGone(obj ctrlclient.Object) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		return apierrors.IsNotFound(s.kube.Client.Get(context.Background(), ctrlclient.ObjectKeyFromObject(obj), obj))
	}, 90*time.Second, 50*time.Millisecond, "%T %s is deleted", obj, obj.GetName())
}

func succeeded(gen int64) func(*osbv1alpha1.SFServiceInstance) bool {
	return func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateSucceeded && i.Status.ObservedGeneration == gen
	}
}

// registryValue reads one key of a registry Secret, decoded from JSON.
func (s *system) registryValue(secretName, key string) any {
	s.t.Helper()
	var sec corev1.Secret
	require.NoError(s.t, s.kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.ns, Name: secretName}, &sec))
	var v any
	require.NoError(s.t, json.Unmarshal(sec.Data[key], &v), "registry key %s", key)
	return v
}

// runs counts the workflow runs stored under a workflow ID.
func (s *system) runs(workflowID string) int {
	s.t.Helper()
	resp, err := s.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", workflowID),
	})
	require.NoError(s.t, err)
	return len(resp.Executions)
}
