package chart_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// rbacKinds are the chart's objects that grant access.
var rbacKinds = map[string]bool{"ServiceAccount": true, "Role": true, "RoleBinding": true, "ClusterRole": true, "ClusterRoleBinding": true}

// TestChartRBACIsEnough: the roles the chart renders, bound to its service
// accounts, let qm's three components run a whole OSB lifecycle with those
// accounts' tokens (provision, bind, unbind, deprovision); and the API's
// account may not create a Secret, in another namespace or its own.
func TestChartRBACIsEnough(t *testing.T) {
	kube := testenv.Kubernetes(t)
	s := testenv.Start(t, testenv.Parts{})
	ns := s.Namespace
	ctx := context.Background()

	// The release's access objects, created for real; fullnameOverride
	// keeps its cluster roles apart from other tests' releases.
	fullname := "qm-rbac"
	objs := render(t, load(t), ns, "fullnameOverride="+fullname)
	for key, obj := range objs {
		if !rbacKinds[obj.GetKind()] {
			continue
		}
		require.NoError(t, kube.Client.Create(ctx, obj), "creating %s", key)
		if obj.GetNamespace() == "" {
			t.Cleanup(func() { _ = kube.Client.Delete(context.Background(), obj) })
		}
	}
	as := func(component string) *rest.Config { return serviceAccountConfig(t, kube, ns, fullname+"-"+component) }

	plan := s.Plan("instant", "", testenv.Templates("instant"))
	tc := testenv.Temporal(t)
	start := func(o system.Options) {
		sys, err := system.Start(ctx, o)
		require.NoError(t, err, "starting a component with its service account's token")
		t.Cleanup(func() { assert.NoError(t, sys.Stop()) })
	}
	start(system.Options{Kube: as("worker"), Catalog: s.Catalog(), Temporal: tc, Worker: true})
	start(system.Options{Kube: as("watcher"), Catalog: s.Catalog(), Temporal: tc,
		Watcher: &starter.WatcherOptions{LeaderElection: true, LeaderElectionNamespace: ns}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var apiLog testenv.SyncBuffer
	srv := &api.Server{Namespace: ns, OSB: testenv.OSBCredentials, Admin: testenv.AdminCredentials, SyncTimeout: 30 * time.Second, BindTimeout: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), &apiLog), nil))}
	start(system.Options{Kube: as("api"), Catalog: s.Catalog(), Temporal: tc, API: srv, APIListeners: api.Listeners{OSB: ln, Admin: adminLn}})
	s.URL, s.AdminURL = "http://"+ln.Addr().String(), "http://"+adminLn.Addr().String()

	inst := "/v2/service_instances/rbac-1"
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusCreated, `{}`)
	var db corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "rbac-1-db"}, &db), "the worker applied the plan")
	s.Expect(http.MethodPut, inst+"/service_bindings/b-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusCreated, `{"credentials": {"user": "u"}}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("%s/service_bindings/b-1?service_id=%s&plan_id=%s", inst, s.ServiceID, plan), "", http.StatusOK, `{}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("%s?service_id=%s&plan_id=%s", inst, s.ServiceID, plan), "", http.StatusOK, `{}`)
	_, err = s.GetInstance("rbac-1")
	assert.True(t, apierrors.IsNotFound(err), "the instance is gone: %v", err)
	assert.True(t, apierrors.IsNotFound(kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "rbac-1-db"}, &db)), "and what it applied")

	// The admin API's console endpoints list the UsageKinds and the
	// workloads they name.
	kind := testenv.Decode(t, fmt.Sprintf(`apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: %s-deployments}
spec: {resource: {group: apps, kind: Deployment, version: v1}, labelsPath: spec.template.metadata.labels}`, ns))
	require.NoError(t, kube.Client.Create(ctx, kind))
	t.Cleanup(func() { _ = kube.Client.Delete(context.Background(), kind) })
	for _, path := range []string{"/admin/usagekinds", "/admin/usagekinds/" + kind.GetName() + "/resources?namespace=" + ns} {
		status, body, _ := testenv.HTTP(http.MethodGet, s.AdminURL+path, "", &testenv.AdminCredentials, nil)
		assert.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
	}

	assert.NotContains(t, apiLog.String(), "forbidden", "the API was refused nothing on the way")

	// The watcher's account probes a registered cluster: here the one it
	// runs in, whose nodes and pods it lists.
	require.NoError(t, kube.Client.Create(ctx, &resourcev1alpha1.SFCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "1"},
		Spec: resourcev1alpha1.SFClusterSpec{SecretRef: "unused"}}))
	require.Eventually(t, func() bool {
		var sfc resourcev1alpha1.SFCluster
		err := kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "1"}, &sfc)
		return err == nil && meta.IsStatusConditionTrue(sfc.Status.Conditions, "Ready") && sfc.Status.CurrentCapacity.Cpu().Sign() > 0
	}, 30*time.Second, 50*time.Millisecond, "the watcher probed the cluster it runs in")

	// The API's account reads Secrets of its namespace (binding
	// credentials) and writes none, here or elsewhere.
	apiClient, err := ctrlclient.New(as("api"), ctrlclient.Options{})
	require.NoError(t, err)
	other := kube.Namespace(t)
	for _, where := range []string{other, ns} {
		err := apiClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stolen", Namespace: where}})
		assert.True(t, apierrors.IsForbidden(err), "the API's account creates a Secret in %s: %v", where, err)
	}
	err = apiClient.Get(ctx, ctrlclient.ObjectKey{Namespace: other, Name: "any"}, &corev1.Secret{})
	assert.True(t, apierrors.IsForbidden(err), "nor reads one in another namespace: %v", err)
}

// serviceAccountConfig reaches the API server as the service account
// ns/name, with a token of the TokenRequest API, as a pod would.
func serviceAccountConfig(t *testing.T, kube *testenv.Cluster, ns, name string) *rest.Config {
	t.Helper()
	return &rest.Config{Host: kube.Config.Host, BearerToken: kube.ServiceAccountToken(t, ns, name),
		TLSClientConfig: rest.TLSClientConfig{CAData: kube.Config.CAData}, QPS: -1}
}
