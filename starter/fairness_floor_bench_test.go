package starter_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// tenantFloor provisions the tenant-namespace sample with the mandated
// parts alone: the API server (and etcd) and Temporal, with no logic of
// Quartermaster's between the calls. It is BenchmarkFairness's floor.
type tenantFloor struct {
	c  ctrlclient.Client
	ns string
}

// fairnessFloorCase is BenchmarkFairness's OSB case with the mandated parts
// alone: each provision, A's 1,000 and B's 20 alike, is the instance's
// create (the OSB API's write), a run started eagerly with the user's
// priority and its organization's fairness key, and in it, as local
// activities, the worker's read of the instance, its registry Secret, the
// sample's six objects applied (namespace, quota, role, role binding,
// admin Secret, ConfigMap) and the status patch. No watcher, no render, no
// fence, no operator view. B's times here are what no order of
// Quartermaster's work can give back: the machine's, during A's burst.
func fairnessFloorCase(b *testing.B, n, bN int, every time.Duration) fairnessFigures {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := testenv.FileTemporalWith(b, nil)
	kube := testenv.Kubernetes(b)
	f := &tenantFloor{c: kube.Client, ns: kube.Namespace(b)}
	w := sdkworker.New(tc, floorTaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(f.provision, workflow.RegisterOptions{Name: "TenantProvisionFloor"})
	require.NoError(b, w.Start())
	defer w.Stop()
	tr := track(ctx, b, kube.Config, f.ns)
	provision := func(name, org string) error {
		if err := f.c.Create(ctx, floorInstance(f.ns, name)); err != nil {
			return err
		}
		_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "floor/" + f.ns + "/" + name, TaskQueue: floorTaskQueue,
			EnableEagerStart: true, Priority: runs.Priority(fairness.User, fairness.Tenant(f.ns, org))}, "TenantProvisionFloor", name)
		return err
	}

	aNames := make([]string, n)
	for i := range aNames {
		aNames[i] = fmt.Sprintf("a-%05d", i)
	}
	served := apiRequests(b, kube)
	began := time.Now()
	aDone := make(chan error, 1)
	go func() { aDone <- parallel(n, func(i int) error { return provision(aNames[i], "org-a") }) }()
	bNames, created, _ := tenantB(b, bN, every, func(name string) error { return provision(name, "org-b") })
	tr.waitAll(b, bNames, 10*time.Minute)
	figures := fairnessFigures{b: tr.latencies(bNames, created)}
	require.NoError(b, <-aDone)
	tr.waitAll(b, aNames, 10*time.Minute)
	aEnded := lastSeen(tr.seen(), aNames)
	figures.burst, figures.during = aEnded.Sub(began), askedBefore(created, aEnded)
	figures.served = perProvision(served, apiRequests(b, kube), n+bN)
	return figures
}

// provision is the floor's run: the worker's steps with nothing between
// the API calls.
func (f *tenantFloor) provision(ctx workflow.Context, name string) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
	for _, step := range []func(context.Context, string) error{f.read, f.apply, f.finish} {
		if err := workflow.ExecuteLocalActivity(ctx, step, name).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func (f *tenantFloor) read(ctx context.Context, name string) error {
	return floorRead(ctx, f.c, f.ns, name)
}

func (f *tenantFloor) finish(ctx context.Context, name string) error {
	return floorFinish(ctx, f.c, f.ns, name, true)
}

// apply writes the instance's registry Secret and applies the objects the
// tenant-namespace sample's provision template makes.
func (f *tenantFloor) apply(ctx context.Context, name string) error {
	registrySecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "qm-instance-" + name, Namespace: f.ns},
		Data: map[string][]byte{"instance-id": []byte(`"` + name + `"`)}}
	if err := f.c.Create(ctx, registrySecret); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	sum := sha256.Sum256([]byte(f.ns + "/" + name))
	tenant := "tenant-" + hex.EncodeToString(sum[:])[:12]
	meta := func(name, ns string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }
	objs := []ctrlclient.Object{
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: meta(tenant, "")},
		&corev1.ResourceQuota{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ResourceQuota"}, ObjectMeta: meta("tenant", tenant),
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}}},
		&rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: meta("tenant-user", tenant),
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get", "list"}}}},
		&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"}, ObjectMeta: meta("tenant-admins", tenant),
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant-user"},
			Subjects: []rbacv1.Subject{{Kind: "Group", Name: tenant + "-admins", APIGroup: "rbac.authorization.k8s.io"}}},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta("tenant-admin", tenant),
			StringData: map[string]string{"username": "admin", "password": "floor-password-of-24-char"}},
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta(name+"-tenant", f.ns),
			Data: map[string]string{"namespace": tenant, "pods": "10"}},
	}
	for _, obj := range objs {
		if err := f.c.Patch(ctx, obj, ctrlclient.Apply, ctrlclient.FieldOwner("qm"), ctrlclient.ForceOwnership); err != nil {
			return fmt.Errorf("applying %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}
