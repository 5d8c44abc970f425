package metrics

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	scv1alpha1 "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
)

func instance(name, plan string, state osbv1alpha1.OperationState, mutate ...func(*osbv1alpha1.SFServiceInstance)) client.Object {
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:   osbv1alpha1.SFServiceInstanceSpec{ServiceID: "svc", PlanID: plan},
		Status: osbv1alpha1.SFServiceInstanceStatus{State: state}}
	for _, m := range mutate {
		m(inst)
	}
	return inst
}

// TestFleetCountsEachKindByState counts a small fleet of every kind, as a
// scrape of the watcher shows it.
func TestFleetCountsEachKindByState(t *testing.T) {
	waiting := func(i *osbv1alpha1.SFServiceInstance) {
		i.Status.Conditions = []metav1.Condition{{Type: conditionScheduled, Status: metav1.ConditionFalse, Reason: "NoRoom"}}
	}
	scheduled := func(i *osbv1alpha1.SFServiceInstance) { i.Spec.ClusterID = "c1" }
	provisioned := func(i *osbv1alpha1.SFServiceInstance) {
		i.Spec.ClusterID = "c1"
		i.Status.AppliedSpec = i.Spec.DeepCopy()
	}
	limit, polling := int32(80), int64(600)
	objects := []client.Object{
		instance("a", "p1", osbv1alpha1.StateSucceeded, provisioned),
		instance("b", "p1", osbv1alpha1.StateSucceeded),
		instance("c", "p1", osbv1alpha1.StateFailed),
		instance("d", "p2", osbv1alpha1.StateInProgress, waiting),
		instance("e", "p2", osbv1alpha1.StateInProgress, scheduled),
		instance("f", "p2", ""),
		&osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b1"},
			Spec:   osbv1alpha1.SFServiceBindingSpec{ServiceID: "svc", PlanID: "p1"},
			Status: osbv1alpha1.SFServiceBindingStatus{State: osbv1alpha1.StateSucceeded}},
		&osbv1alpha1.SFPlan{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1"},
			Spec: osbv1alpha1.SFPlanSpec{ID: "p1", ServiceID: "svc", MaximumPollingDuration: &polling}},
		&osbv1alpha1.SFPlan{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p2"}, Spec: osbv1alpha1.SFPlanSpec{ID: "p2", ServiceID: "svc"}},
		&resourcev1alpha1.SFCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
			Spec: resourcev1alpha1.SFClusterSpec{SchedulingLimitPercentage: &limit},
			Status: resourcev1alpha1.SFClusterStatus{State: resourcev1alpha1.ClusterReady, ServiceInstanceCount: 1,
				TotalCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
				Requests:      corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}},
		&primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s1"},
			Status: primazav1alpha1.RegisteredServiceStatus{State: primazav1alpha1.ServiceUnreachable}},
		&primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s2"},
			Status: primazav1alpha1.RegisteredServiceStatus{State: primazav1alpha1.ServiceClaimed}},
		&primazav1alpha1.ServiceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
			Status: primazav1alpha1.ServiceClaimStatus{State: primazav1alpha1.ClaimResolved}},
		&scv1alpha1.ServiceBindingUsage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "u1"}},
		&sbv1.ServiceBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb1"},
			Status: sbv1.ServiceBindingStatus{Conditions: []metav1.Condition{{Type: sbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Projected"}}}},
		&sbv1.ServiceBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb2"}},
	}
	reader := fake.NewClientBuilder().WithScheme(crds.NewScheme()).WithObjects(objects...).Build()

	want := `
# HELP qm_instances SFServiceInstances by plan and state of their last operation (pending: none began yet), by the watcher shard that counts them.
# TYPE qm_instances gauge
qm_instances{plan="p1",service="svc",shard="0/1",state="failed"} 1
qm_instances{plan="p1",service="svc",shard="0/1",state="succeeded"} 2
qm_instances{plan="p2",service="svc",shard="0/1",state="in progress"} 2
qm_instances{plan="p2",service="svc",shard="0/1",state="pending"} 1
# HELP qm_instances_waiting_for_cluster SFServiceInstances whose provision waits for a cluster with room (Scheduled=False).
# TYPE qm_instances_waiting_for_cluster gauge
qm_instances_waiting_for_cluster{plan="p2",service="svc",shard="0/1"} 1
# HELP qm_cluster_reservations Instances scheduled onto each SFCluster whose provision has not succeeded yet: the scheduler's reservations.
# TYPE qm_cluster_reservations gauge
qm_cluster_reservations{cluster="c1",namespace="ns",shard="0/1"} 1
# HELP qm_bindings SFServiceBindings by plan and state of their last operation.
# TYPE qm_bindings gauge
qm_bindings{plan="p1",service="svc",shard="0/1",state="succeeded"} 1
# HELP qm_plan_maximum_polling_seconds Each plan's maximum_polling_duration (an hour when it sets none): the time an operation may stay in progress.
# TYPE qm_plan_maximum_polling_seconds gauge
qm_plan_maximum_polling_seconds{plan="p1",service="svc"} 600
qm_plan_maximum_polling_seconds{plan="p2",service="svc"} 3600
# HELP qm_cluster_instances Instances each SFCluster holds (status.serviceInstanceCount).
# TYPE qm_cluster_instances gauge
qm_cluster_instances{cluster="c1",namespace="ns"} 1
# HELP qm_cluster_use_ratio Each SFCluster's requests over its capacity, by resource.
# TYPE qm_cluster_use_ratio gauge
qm_cluster_use_ratio{cluster="c1",namespace="ns",resource="cpu"} 0.25
# HELP qm_cluster_limit_ratio The share of its capacity the scheduler fills each SFCluster to (schedulingLimitPercentage / 100).
# TYPE qm_cluster_limit_ratio gauge
qm_cluster_limit_ratio{cluster="c1",namespace="ns"} 0.8
# HELP qm_cluster_ready 1 while an SFCluster's cluster answers its probes (state Ready), else 0.
# TYPE qm_cluster_ready gauge
qm_cluster_ready{cluster="c1",namespace="ns"} 1
# HELP qm_registered_services RegisteredServices by state (Available, Claimed, Unknown, Unreachable).
# TYPE qm_registered_services gauge
qm_registered_services{namespace="ns",state="Claimed"} 1
qm_registered_services{namespace="ns",state="Unreachable"} 1
# HELP qm_service_claims ServiceClaims by state (Pending, Resolved, Invalid).
# TYPE qm_service_claims gauge
qm_service_claims{namespace="ns",state="Resolved"} 1
# HELP qm_binding_usages ServiceBindingUsages by state (Pending, Ready, Failed).
# TYPE qm_binding_usages gauge
qm_binding_usages{namespace="ns",state="pending"} 1
# HELP qm_service_bindings servicebinding.io ServiceBindings by their Ready condition (True, False, Unknown).
# TYPE qm_service_bindings gauge
qm_service_bindings{namespace="ns",ready="True"} 1
qm_service_bindings{namespace="ns",ready="Unknown"} 1
`
	require.NoError(t, testutil.CollectAndCompare(&Fleet{Reader: reader}, strings.NewReader(want)))
}

// TestFleetOfAShard: a watcher shard other than the first counts only its
// instances and bindings, each series naming the shard, so that the
// shards' series add up.
func TestFleetOfAShard(t *testing.T) {
	reader := fake.NewClientBuilder().WithScheme(crds.NewScheme()).WithObjects(
		instance("a", "p1", osbv1alpha1.StateSucceeded),
		&osbv1alpha1.SFPlan{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1"}, Spec: osbv1alpha1.SFPlanSpec{ID: "p1", ServiceID: "svc"}},
		&primazav1alpha1.ServiceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}},
	).Build()
	fleet := &Fleet{Reader: reader, Shard: "1/3", Only: []client.Object{&osbv1alpha1.SFServiceInstance{}, &osbv1alpha1.SFServiceBinding{}}}
	out, err := testutil.CollectAndFormat(fleet, expfmt.TypeTextPlain, "qm_instances", "qm_plan_maximum_polling_seconds", "qm_service_claims")
	require.NoError(t, err)
	assert.Contains(t, string(out), `qm_instances{plan="p1",service="svc",shard="1/3",state="succeeded"} 1`)
	assert.NotContains(t, string(out), "qm_plan_maximum_polling_seconds", "the first shard's")
	assert.NotContains(t, string(out), "qm_service_claims", "the first shard's")
}

// TestFleetLeavesOutAKindItCannotList: a kind whose list fails (its CRD not
// installed) is left out of the scrape, the others still counted.
func TestFleetLeavesOutAKindItCannotList(t *testing.T) {
	scheme := crds.NewScheme()
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(instance("a", "p1", osbv1alpha1.StateSucceeded)).
		WithInterceptorFuncs(failingList("ServiceClaimList")).Build()
	names, err := testutil.CollectAndFormat(&Fleet{Reader: reader}, expfmt.TypeTextPlain, "qm_instances", "qm_service_claims")
	require.NoError(t, err)
	assert.Contains(t, string(names), `qm_instances{plan="p1",service="svc",shard="0/1",state="succeeded"} 1`)
	assert.NotContains(t, string(names), "qm_service_claims")
}

// TestOutcome: the outcome label of each failure kind.
func TestOutcome(t *testing.T) {
	for kind, want := range map[string]string{
		"":              Succeeded,
		"Timeout":       TimedOut,
		"TemplateError": Failed,
		"StatusFailed":  Failed,
	} {
		assert.Equal(t, want, Outcome(kind), "kind %q", kind)
	}
}

// failingList fails every list of the named list type.
func failingList(listType string) interceptor.Funcs {
	return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
		if reflect.TypeOf(l).Elem().Name() == listType {
			return errors.New("no matches for kind")
		}
		return c.List(ctx, l, opts...)
	}}
}
