package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/worker"
)

// podsRelease is what the test installs: the chart's values and objects,
// and the certificate its API serves, when it serves TLS.
type podsRelease struct {
	ns, fullname string
	values       map[string]any
	objs         map[string]*unstructured.Unstructured
	tls          *servingCert
}

// tenantPlanRules are the rules README "Install on a cluster" tells users
// to add to worker.rbac.planRules for the tenant-namespace sample.
var tenantPlanRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"namespaces", "resourcequotas"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
}

// TestChartPods runs the chart's pods for real: the chart is rendered and
// installed on the test cluster, and each replica of its Deployments runs
// as a process of the /qm of the image `make image` wrote, under its own
// service account (see kubelet). Through those processes it drives every
// capability, a worker killed and started again meanwhile: an OSB
// lifecycle through the API's Service, a kubectl
// instance of the tenant sample, a usage injection into a Deployment, a
// registered service with a container check, a claim projected into that
// Deployment, `qm mass-update` against the admin API, and an instance
// scheduled on a sister cluster. A request the API server refuses any
// component fails the test, naming it; and the permissions the roles grant
// are printed, per component, used and unused, and one never used fails
// the test unless whyKept explains it.
func TestChartPods(t *testing.T) {
	img := unpackImage(t, imageArchive(t))
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	r := installRelease(t, kube)
	k := newKubelet(t, kube, img)
	reportRefusals(t, kube, r, k)

	for _, key := range slices.Sorted(maps.Keys(r.objs)) {
		if r.objs[key].GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(r.objs[key].Object, &d))
		k.run(&d)
	}
	k.waitReady(2 * time.Minute)
	// The workers are one build of the release's worker deployment (the
	// image's tag), current since the first of them polled.
	tc := testenv.Temporal(t)
	builds, _, err := worker.Builds(ctx, tc, r.fullname, nil)
	require.NoError(t, err)
	require.Len(t, builds, 1)
	assert.Equal(t, []string{"0.1.0", "current"}, []string{builds[0].ID, builds[0].Routing})
	t.Cleanup(func() {
		// As after an uninstall: the task queue goes back to unversioned
		// workers, which the next test on this Temporal runs.
		_, err := tc.WorkerDeploymentClient().GetHandle(r.fullname).SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{})
		assert.NoError(t, err, "routing back to the unversioned workers")
	})
	var svc corev1.Service
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(r.objs["Service/"+r.fullname+"-api"].Object, &svc))
	s := testenv.Over(t, kube, r.ns, testenv.KeyValueService)
	// Both APIs over TLS, verified with the release's CA under their
	// Services' names, as a platform in the cluster dials them.
	osbName, adminName := r.fullname+"-api."+r.ns+".svc", r.fullname+"-admin."+r.ns+".svc"
	s.URL, s.Client = "https://"+k.serviceTCP(&svc), r.tls.client(osbName)
	var adminSvc corev1.Service
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(r.objs["Service/"+r.fullname+"-admin"].Object, &adminSvc))
	s.AdminURL = "https://" + k.serviceTCP(&adminSvc)
	adminClient := r.tls.client(adminName)
	status, body, _ := testenv.HTTP(http.MethodGet, "http"+strings.TrimPrefix(s.URL, "https")+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
	assert.Equal(t, http.StatusBadRequest, status, "no plain HTTP: Go's server answers it 400: %s", body)
	status, body, _ = testenv.HTTPWith(r.tls.client("someone-else.example"), http.MethodGet, s.URL+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
	assert.Zero(t, status, "a certificate for other names is refused by the client")
	assert.Contains(t, body, "certificate is valid for "+osbName)

	// A worker's process dies: the kubelet starts it again while the
	// other worker carries on.
	killed := k.pod(r.fullname + "-worker-0")
	require.NoError(t, syscall.Kill(int(killed.pid.Load()), syscall.SIGKILL))

	// An OSB lifecycle through the API's Service, on the key-value-store sample.
	kv := "/v2/service_instances/kv-1"
	provision := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, testenv.KeyValueService, testenv.KeyValuePlan)
	s.Expect(http.MethodPut, kv+"?accepts_incomplete=true", provision, http.StatusAccepted, `{"operation": "provision"}`)
	assert.Equal(t, "succeeded", s.PollLastOperation(kv + "/last_operation?operation=provision")["state"])
	assertVisible(t, `InstanceID = "kv-1" AND Operation = "provision" AND QmState = "succeeded"`)
	var update struct{ Operation string }
	require.NoError(t, json.Unmarshal([]byte(s.Expect(http.MethodPatch, kv+"?accepts_incomplete=true",
		fmt.Sprintf(`{"service_id": %q, "parameters": {"replicas": 2}}`, testenv.KeyValueService), http.StatusAccepted, "")), &update))
	assert.Equal(t, "succeeded", s.PollLastOperation(kv + "/last_operation?operation=" + update.Operation)["state"])
	body = s.Expect(http.MethodPut, kv+"/service_bindings/b-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, testenv.KeyValueService, testenv.KeyValuePlan),
		http.StatusCreated, "")
	assert.Contains(t, body, `"password"`, "the binding's credentials")
	for _, path := range []string{"/v2/catalog", kv, kv + "/service_bindings/b-1"} {
		status, body, _ := s.Do(http.MethodGet, path, "", nil)
		assert.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
	}

	// A kubectl user's instance of the tenant sample, with the plan rules
	// the README has users add.
	kube.Kubectl(t, fmt.Sprintf(`apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceInstance
metadata: {name: tenant-1, namespace: %s}
spec: {serviceId: %s, planId: %s, parameters: {pods: 5}}
`, r.ns, testenv.TenantService, testenv.TenantPlan), "apply", "-f", "-")
	s.WaitInstance("tenant-1", "provisioned", succeeded)
	kube.Kubectl(t, fmt.Sprintf(`apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: tenant-1-ci, namespace: %s}
spec: {id: tenant-1-ci, instanceId: tenant-1, serviceId: %s, planId: %s}
`, r.ns, testenv.TenantService, testenv.TenantPlan), "apply", "-f", "-")
	kube.Kubectl(t, "", "-n", r.ns, "wait", "sfservicebinding/tenant-1-ci", "--for=jsonpath={.status.state}=succeeded", "--timeout=60s")
	assertVisible(t, fmt.Sprintf(`QmKind = "SFServiceBinding" AND QmNamespace = %q AND QmName = "tenant-1-ci" AND QmState = "succeeded"`, r.ns))

	// A usage injects the OSB binding into a Deployment.
	kube.Kubectl(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: example.com/web}]}
---
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: %[1]s-deployment}
spec: {displayName: Deployment, resource: {group: apps, kind: deployment, version: v1}, labelsPath: spec.template.metadata.labels}
---
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: ServiceBindingUsage
metadata: {name: web-kv, namespace: %[1]s}
spec:
  serviceBindingRef: {name: b-1}
  usedBy: {kind: %[1]s-deployment, name: web}
  parameters: {envPrefix: {name: KV_}}
`, r.ns), "apply", "-f", "-")
	t.Cleanup(func() {
		_ = kube.Client.Delete(context.Background(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "servicecatalog.kyma-project.io/v1alpha1", "kind": "UsageKind", "metadata": map[string]any{"name": r.ns + "-deployment"}}})
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var kind sc.UsageKind
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Name: r.ns + "-deployment"}, &kind))
		ready := meta.FindStatusCondition(kind.Status.Conditions, sc.UsageKindReady)
		if assert.NotNil(c, ready) {
			assert.Equal(c, metav1.ConditionTrue, ready.Status, "the UsageKind is ready: %s", ready.Message)
		}
		var d appsv1.Deployment
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: r.ns, Name: "web"}, &d))
		assert.Contains(c, envNamesOf(d.Spec.Template), "KV_password", "the binding's password is injected")
	}, time.Minute, 100*time.Millisecond, "the usage injects the binding into web")

	require.Eventually(t, func() bool { return killed.restarts.Load() == 1 && killed.ready.Load() }, time.Minute, 100*time.Millisecond,
		"the killed worker was started again and is ready")

	// The admin API's views: instances, and the workloads a console may
	// pick for a usage.
	for _, path := range []string{"/admin/instances?namespace=" + r.ns, "/admin/instances/" + r.ns + "/kv-1", "/admin/usagekinds",
		"/admin/usagekinds/" + r.ns + "-deployment/resources?namespace=" + r.ns} {
		status, body, _ := testenv.HTTPWith(adminClient, http.MethodGet, s.AdminURL+path, "", &testenv.AdminCredentials, nil)
		assert.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
	}
	status, body, _ = testenv.HTTPWith(s.Client, http.MethodGet, s.URL+"/admin/instances", "", &testenv.AdminCredentials, nil)
	assert.Equal(t, http.StatusNotFound, status, "the admin API is not behind the OSB API's Service: %s", body)

	// A registered service with a container check, claimed by an
	// application: the claim projects its Secret into web.
	kube.Kubectl(t, fmt.Sprintf(`apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: db-1, namespace: %[1]s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}, {name: provider, value: aws}]
  serviceEndpointDefinition: [{name: host, value: db-1.example}]
  healthcheck:
    container: {image: "alpine:3.20", command: [/bin/sh, -c, exit 0], minutes: 1}
---
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: shop-db, namespace: %[1]s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host]
  target: {environmentTag: dev}
  application: {apiVersion: apps/v1, kind: Deployment, name: web}
  envs: [{name: DB_HOST, key: host}]
`, r.ns), "apply", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var claim primazav1alpha1.ServiceClaim
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: r.ns, Name: "shop-db"}, &claim))
		assert.Equal(c, primazav1alpha1.ClaimResolved, claim.Status.State)
		var d appsv1.Deployment
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: r.ns, Name: "web"}, &d))
		assert.Contains(c, envNamesOf(d.Spec.Template), "DB_HOST", "the claim is projected into web")
	}, time.Minute, 100*time.Millisecond, "the checked service is claimed")

	// `qm mass-update` (the image's) updates the key-value instances to a
	// new generation of their plan, through the admin API.
	kube.Kubectl(t, "", "-n", r.ns, "patch", "sfplan", "key-value-store-small", "--type=merge", "-p", `{"spec":{"description":"A small key-value store, v2"}}`)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, r.tls.ca, 0o600))
	out, err := exec.Command(filepath.Join(img.root, "qm"), "mass-update", "start", "--url", s.AdminURL, "--ca-file", caFile, "--tls-server-name", adminName,
		"--username", testenv.AdminCredentials.Username,
		"--password", testenv.AdminCredentials.Password, "--plan", testenv.KeyValuePlan, "--namespace", r.ns, "--wait").CombinedOutput()
	require.NoError(t, err, "qm mass-update: %s", out)
	assert.Contains(t, string(out), "completed: 1/1 (1 succeeded, 0 failed, 0 skipped)")

	// An instance scheduled on a sister cluster, the one SFCluster.
	sister := testenv.StartSister(t, 1)
	require.NoError(t, kube.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "eu-1-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": sister.Kubeconfig}}))
	kube.Kubectl(t, fmt.Sprintf(`apiVersion: resource.servicefabrik.io/v1alpha1
kind: SFCluster
metadata: {name: eu-1, namespace: %s, labels: {region: eu}}
spec: {secretRef: eu-1-kubeconfig}
`, r.ns), "apply", "-f", "-")
	eu := "/v2/service_instances/kv-eu"
	s.Expect(http.MethodPut, eu+"?accepts_incomplete=true", provision, http.StatusAccepted, `{"operation": "provision"}`)
	assert.Equal(t, "succeeded", s.PollLastOperation(eu + "/last_operation?operation=provision")["state"])
	inst, err := s.GetInstance("kv-eu")
	require.NoError(t, err)
	assert.Equal(t, "eu-1", inst.Spec.ClusterID, "scheduled on the sister")
	require.NoError(t, sister.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: r.ns, Name: "qm-instance-kv-eu"}, &corev1.Secret{}),
		"the instance's registry is on the sister")
	body = s.Expect(http.MethodPut, eu+"/service_bindings/b-eu", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, testenv.KeyValueService, testenv.KeyValuePlan),
		http.StatusCreated, "")
	assert.Contains(t, body, `"password"`, "the credentials, read from the sister")

	// The cluster Quartermaster runs in, registered too: the watcher
	// probes it with its own account.
	kube.Kubectl(t, fmt.Sprintf(`apiVersion: resource.servicefabrik.io/v1alpha1
kind: SFCluster
metadata: {name: "1", namespace: %s}
spec: {secretRef: unused}
`, r.ns), "apply", "-f", "-")
	kube.Kubectl(t, "", "-n", r.ns, "wait", "sfcluster/1", "sfcluster/eu-1", "--for=condition=Ready", "--timeout=60s")

	// The ends: the usage, then the OSB binding and instance; the claim,
	// which takes its projection back; the tenant instance, whose binding
	// goes with it; and the sister's instance by the inter-operator's
	// status.state "delete".
	kube.Kubectl(t, "", "-n", r.ns, "delete", "servicebindingusage", "web-kv")
	s.Expect(http.MethodDelete, fmt.Sprintf("%s/service_bindings/b-1?service_id=%s&plan_id=%s", kv, testenv.KeyValueService, testenv.KeyValuePlan),
		"", http.StatusOK, `{}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("%s?accepts_incomplete=true&service_id=%s&plan_id=%s", kv, testenv.KeyValueService, testenv.KeyValuePlan),
		"", http.StatusAccepted, `{"operation": "deprovision"}`)
	s.ExpectSoon(kv+"/last_operation?operation=deprovision", http.StatusGone, `{}`)
	kube.Kubectl(t, "", "-n", r.ns, "delete", "serviceclaim", "shop-db", "--wait=true", "--timeout=60s")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var d appsv1.Deployment
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: r.ns, Name: "web"}, &d))
		assert.NotContains(c, envNamesOf(d.Spec.Template), "DB_HOST", "the claim's projection is taken back")
	}, time.Minute, 100*time.Millisecond)
	// Its binding tenant-1-ci goes with it, as the annotation asks.
	kube.Kubectl(t, "", "-n", r.ns, "annotate", "sfserviceinstance", "tenant-1", osbv1alpha1.DeprovisionInUseAnnotation+"=true")
	kube.Kubectl(t, "", "-n", r.ns, "delete", "sfserviceinstance", "tenant-1", "--wait=true", "--timeout=90s")
	kube.Kubectl(t, "", "-n", r.ns, "delete", "sfservicebinding", "b-eu", "--wait=true", "--timeout=60s")
	kube.Kubectl(t, "", "-n", r.ns, "patch", "sfserviceinstance", "kv-eu", "--subresource=status", "--type=merge", "-p", `{"status":{"state":"delete"}}`)
	kube.Kubectl(t, "", "-n", r.ns, "wait", "sfserviceinstance/kv-eu", "--for=delete", "--timeout=90s")

	assertProtected(t, kube, r)
	checkAccess(t, kube, r)
}

// assertProtected: the chart's protection policy refuses the worker's own
// service account a ServiceAccount-token Secret and a write in a
// protected namespace, with messages that say why, as a bad catalog plan
// would meet them.
func assertProtected(t *testing.T, kube *testenv.Cluster, r podsRelease) {
	t.Helper()
	ctx := context.Background()
	cfg := rest.CopyConfig(kube.Config)
	cfg.CertData, cfg.KeyData, cfg.Impersonate = nil, nil, rest.ImpersonationConfig{}
	cfg.BearerToken = kube.ServiceAccountToken(t, r.ns, r.fullname+"-worker")
	asWorker, err := ctrlclient.New(cfg, ctrlclient.Options{})
	require.NoError(t, err)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "minted", Namespace: r.ns,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: r.fullname + "-worker"}}, Type: corev1.SecretTypeServiceAccountToken}
	err = asWorker.Create(ctx, token)
	require.Error(t, err, "the worker may not mint a token")
	assert.Contains(t, err.Error(), "Quartermaster may not write a ServiceAccount-token Secret")
	planted := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "planted-" + r.ns, Namespace: "kube-system"}}
	err = asWorker.Create(ctx, planted)
	require.Error(t, err, "the worker may not write in kube-system")
	assert.Contains(t, err.Error(), "Quartermaster may not write in namespace kube-system, which the operator protects")
	// Its ordinary writes still pass the policy.
	ordinary := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ordinary", Namespace: r.ns}, StringData: map[string]string{"a": "b"}}
	require.NoError(t, asWorker.Create(ctx, ordinary))
	require.NoError(t, asWorker.Delete(ctx, ordinary))
}

// installRelease renders the chart for a namespace of its own, as
// `helm install` with the values README "Install on a cluster" has users
// set, and applies everything but the Deployments, which the kubelet runs.
func installRelease(t *testing.T, kube *testenv.Cluster) podsRelease {
	t.Helper()
	r := newPodsRelease(t, kube, nil)
	// The API serves TLS with a certificate of cert-manager's layout, for
	// the names of its two Services.
	cert := newServingCert(t, r.fullname+"-api."+r.ns+".svc", r.fullname+"-admin."+r.ns+".svc")
	r.tls = &cert
	require.NoError(t, kube.Client.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "api-tls"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"ca.crt": cert.ca, "tls.crt": cert.cert, "tls.key": cert.key}}))
	r.values["api"] = map[string]any{"tls": map[string]any{"enabled": true, "secretName": "api-tls"}}
	r.objs = testenv.RenderChart(t, testenv.QMChart(t), r.ns, r.values)
	applyRelease(t, kube, r.objs, true)
	return r
}

// newPodsRelease is a release in a namespace of its own, named after it,
// with the platform's and the operator's credentials as Secrets of the
// user's, and the values of installRelease (extra over them).
func newPodsRelease(t *testing.T, kube *testenv.Cluster, extra map[string]any) podsRelease {
	t.Helper()
	ctx := context.Background()
	r := podsRelease{ns: kube.Namespace(t)}
	// Cluster roles are cluster-wide: the release is named after its namespace.
	r.fullname = r.ns
	// The platform's and the operator's credentials, as Secrets of the
	// user's (credentials.*.existingSecret).
	for name, creds := range map[string]api.Credentials{"platform-creds": testenv.OSBCredentials, "operator-creds": testenv.AdminCredentials} {
		require.NoError(t, kube.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
			StringData: map[string]string{"username": creds.Username, "password": creds.Password}}))
	}
	values := testenv.QMChart(t).Values
	planRules := slices.Clone(values["worker"].(map[string]any)["rbac"].(map[string]any)["planRules"].([]any))
	for _, rule := range tenantPlanRules {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&rule)
		require.NoError(t, err)
		planRules = append(planRules, u)
	}
	workerValues := map[string]any{"scheduler": "label-selector", "rbac": map[string]any{"planRules": planRules}}
	maps.Copy(workerValues, extra)
	r.values = map[string]any{
		"fullnameOverride": r.fullname,
		"temporal":         map[string]any{"address": testenv.TemporalAddress(t)},
		"sampleCatalog":    []any{"tenant-namespace", "key-value-store"},
		"credentials": map[string]any{"osb": map[string]any{"existingSecret": "platform-creds"},
			"admin": map[string]any{"existingSecret": "operator-creds"}},
		"worker": workerValues,
	}
	return r
}

// applyRelease applies a release's objects as Helm does, by server-side
// apply, but for the Deployments (the kubelet runs them), the autoscaler,
// and the CRDs unless withCRDs (Helm installs crds/ only where they are
// missing; the chart's hook applies them forward).
func applyRelease(t *testing.T, kube *testenv.Cluster, objs map[string]*unstructured.Unstructured, withCRDs bool) {
	t.Helper()
	ctx := context.Background()
	// What must exist before what refers to it: CRDs and accounts first.
	order := []string{"CustomResourceDefinition", "ServiceAccount", "Secret", "ConfigMap", "ClusterRole", "Role"}
	rank := func(kind string) int {
		if i := slices.Index(order, kind); i >= 0 {
			return i
		}
		return len(order)
	}
	keys := slices.SortedFunc(maps.Keys(objs), func(a, b string) int {
		ka, _, _ := strings.Cut(a, "/")
		kb, _, _ := strings.Cut(b, "/")
		return cmp.Or(cmp.Compare(rank(ka), rank(kb)), strings.Compare(a, b))
	})
	for _, key := range keys {
		obj := objs[key]
		switch obj.GetKind() {
		case "Deployment", "HorizontalPodAutoscaler":
			continue
		case "CustomResourceDefinition":
			if !withCRDs {
				continue
			}
		}
		require.NoError(t, kube.Client.Patch(ctx, obj.DeepCopy(), ctrlclient.Apply, ctrlclient.FieldOwner("helm"), ctrlclient.ForceOwnership), "installing %s", key)
		if obj.GetNamespace() == "" && obj.GetKind() != "CustomResourceDefinition" {
			t.Cleanup(func() { _ = kube.Client.Delete(context.Background(), obj) })
		}
	}
}

// succeeded is an instance whose last operation, on its current
// generation, succeeded.
// assertVisible waits until Temporal's visibility lists a run for query,
// as an operator's search in the UI finds it (visibility is written after
// the run's own history, on SQL as on SQLite).
func assertVisible(t *testing.T, query string) {
	t.Helper()
	tc := testenv.Temporal(t)
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(c, err, query)
		assert.NotEmpty(c, resp.GetExecutions(), "no run in visibility for %s", query)
	}, 30*time.Second, 200*time.Millisecond)
}

func succeeded(i *osbv1alpha1.SFServiceInstance) bool {
	return i.Status.State == osbv1alpha1.StateSucceeded && i.Status.ObservedGeneration == i.Generation
}

func envNamesOf(tpl corev1.PodTemplateSpec) []string {
	var names []string
	for _, c := range tpl.Spec.Containers {
		for _, e := range c.Env {
			names = append(names, e.Name)
		}
	}
	return names
}
