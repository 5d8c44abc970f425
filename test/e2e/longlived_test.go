package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// longLived is every kind of long-lived run an upgrade must carry across:
// upgradeServices registered services checked every minute of the
// workers' (checks counts the probes their endpoints took), a claim
// Resolved and one Pending, a binding usage and a ServiceBinding injecting
// into a Deployment, and the instance whose binding the usage injects.
type longLived struct {
	checks atomic.Int64
	// plan is the instance's plan, whose provisions are instant.
	plan string
	// settled says that every long-lived run runs and every resource is
	// in its state.
	settled func(c *assert.CollectT)
}

// startLongLived creates the long-lived runs' resources in the System's
// namespace; instance names the instance.
func startLongLived(t *testing.T, s *testenv.System, instance string) *longLived {
	t.Helper()
	ctx := context.Background()
	l := &longLived{}
	for i, port := range testenv.Listeners(t, upgradeServices, &l.checks) {
		s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: svc-%02d, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: %s}]
  serviceEndpointDefinition: [{name: host, value: 127.0.0.1}]
  healthcheck:
    tcp: {host: 127.0.0.1, port: %d, minutes: 1, timeoutSeconds: 1}`, i, s.Namespace, map[bool]string{true: "claimed", false: "free"}[i == 0], port))
	}
	for _, claim := range [][2]string{{"resolved", "claimed"}, {"pending", "nothing-offers"}} {
		s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: %s, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: %s}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev`, claim[0], s.Namespace, claim[1]))
	}
	l.plan = s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance(instance, l.plan, "")
	s.WaitInstance(instance, "provisioned", testenv.Succeeded(1))
	s.Bind(instance, instance, l.plan)
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	kind := s.Namespace + "-deployment"
	s.Create(fmt.Sprintf(`
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: %s}
spec:
  displayName: Deployment
  resource: {group: apps, kind: deployment, version: v1}
  labelsPath: spec.template.metadata.labels`, kind))
	t.Cleanup(func() {
		_ = s.Kube.Client.Delete(context.Background(), &sc.UsageKind{ObjectMeta: metav1.ObjectMeta{Name: kind}})
	})
	s.Create(fmt.Sprintf(`
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: ServiceBindingUsage
metadata: {name: web-db, namespace: %[1]s}
spec:
  serviceBindingRef: {name: %[3]s}
  usedBy: {kind: %[2]s, name: web}
  parameters: {envPrefix: {name: DB_}}`, s.Namespace, kind, instance))
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: web-claim, namespace: %s}
spec:
  service: {apiVersion: primaza.io/v1alpha1, kind: ServiceClaim, name: resolved}
  workload: {apiVersion: apps/v1, kind: Deployment, name: web}`, s.Namespace))

	loops := []string{runs.AllocatorID(s.Namespace), runs.ClaimID(s.Namespace, "resolved"), runs.ClaimID(s.Namespace, "pending"),
		runs.BindingUsageID(s.Namespace, "web-db"), runs.ServiceBindingID(s.Namespace, "web-claim")}
	for shard := range healthcheck.Shards {
		loops = append(loops, runs.HealthChecksID(shard))
	}
	l.settled = func(c *assert.CollectT) {
		for _, id := range loops {
			resp, err := s.Temporal.DescribeWorkflowExecution(ctx, id, "")
			if assert.NoError(c, err, id) {
				assert.Equal(c, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, resp.GetWorkflowExecutionInfo().GetStatus(), id)
			}
		}
		var svcs primazav1alpha1.RegisteredServiceList
		require.NoError(c, s.Kube.Client.List(ctx, &svcs, ctrlclient.InNamespace(s.Namespace)))
		up := 0
		for _, svc := range svcs.Items {
			if svc.Status.State == primazav1alpha1.ServiceAvailable || svc.Status.State == primazav1alpha1.ServiceClaimed {
				up++
			}
		}
		assert.Equal(c, upgradeServices, up, "every service checked and up")
		var claims primazav1alpha1.ServiceClaimList
		require.NoError(c, s.Kube.Client.List(ctx, &claims, ctrlclient.InNamespace(s.Namespace)))
		states := map[string]primazav1alpha1.ClaimState{}
		for _, claim := range claims.Items {
			states[claim.Name] = claim.Status.State
		}
		assert.Equal(c, map[string]primazav1alpha1.ClaimState{"resolved": primazav1alpha1.ClaimResolved, "pending": primazav1alpha1.ClaimPending}, states)
		var usage sc.ServiceBindingUsage
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "web-db"}, &usage))
		assert.Equal(c, sc.UsageReady, usage.Status.State)
	}
	return l
}

// checkLateService registers a service whose endpoint is down, named
// name, and checks that it turns Unreachable: the release running now
// checks what is registered now.
func checkLateService(t *testing.T, s *testenv.System, name, release string) {
	t.Helper()
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: %s, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: late}]
  serviceEndpointDefinition: [{name: host, value: 127.0.0.1}]
  healthcheck:
    tcp: {host: 127.0.0.1, port: %d, minutes: 1, timeoutSeconds: 1}`, name, s.Namespace, closedPort(t)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var svc primazav1alpha1.RegisteredService
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &svc))
		assert.Equal(c, primazav1alpha1.ServiceUnreachable, svc.Status.State)
	}, 3*upgradeCheckMinute, 200*time.Millisecond, "a service whose endpoint is down turns Unreachable on %s", release)
}
