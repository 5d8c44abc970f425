package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/testenv"
)

// usageKindsPage is a page of GET /admin/usagekinds.
type usageKindsPage struct {
	Items []struct {
		Name        string `json:"name"`
		DisplayName string `json:"display_name"`
		Kind        string `json:"kind"`
		Resource    string `json:"resource"`
		Ready       bool   `json:"ready"`
		Reason      string `json:"reason"`
	} `json:"items"`
	Continue string `json:"continue"`
}

// targetsPage is a page of GET /admin/usagekinds/{name}/resources.
type targetsPage struct {
	Items []struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"items"`
	Continue string `json:"continue"`
}

// TestAdminUsageKinds: Kyma's two console endpoints. The usage kinds come
// with their display names and readiness; the resources of a kind in a
// namespace leave out those another object owns (the Deployment a kubeless
// Function owns), page by page as the Kubernetes list; every bad request is
// refused with a message.
func TestAdminUsageKinds(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{API: true, Watcher: true})
	s.InstallCRD("function")
	ctx := context.Background()
	kind := func(name, resource string) string {
		full := s.Namespace + "-" + strings.ToLower(name)
		obj := s.Create(fmt.Sprintf(`apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: %s}
spec:
  displayName: %s
  resource: %s
  labelsPath: spec.template.metadata.labels`, full, name, resource))
		t.Cleanup(func() { _ = s.Kube.Client.Delete(context.Background(), obj) })
		return full
	}
	deployments := kind("Deployments", "{group: apps, kind: deployment, version: v1}")
	functions := kind("Functions", "{group: kubeless.io, kind: Function, version: v1beta1}")
	missing := kind("Nothing", "{group: example.com, kind: Nothing, version: v1}")

	deployment := func(name, owner string) {
		s.Create(fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s, labels: {app: %s}%s}
spec:
  replicas: 0
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec: {containers: [{name: app, image: example.com/app}]}`, name, s.Namespace, name, owner, name, name))
	}
	fn := s.Create(fmt.Sprintf(`apiVersion: kubeless.io/v1beta1
kind: Function
metadata: {name: hello, namespace: %s}
spec: {handler: hello.handler, runtime: python3.9}`, s.Namespace))
	deployment("web", "")
	deployment("worker", "")
	deployment("hello", fmt.Sprintf(", ownerReferences: [{apiVersion: kubeless.io/v1beta1, kind: Function, name: hello, uid: %s}]", fn.GetUID()))
	// Another namespace's Deployment is not listed.
	other := s.Kube.Namespace(t)
	require.NoError(t, s.Kube.Client.Create(ctx, testenv.Decode(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: elsewhere, namespace: %s}
spec:
  selector: {matchLabels: {app: elsewhere}}
  template:
    metadata: {labels: {app: elsewhere}}
    spec: {containers: [{name: app, image: example.com/app}]}`, other))))

	get := func(path string) (int, string) {
		status, body, _ := testenv.HTTP(http.MethodGet, s.AdminURL+path, "", &testenv.AdminCredentials, nil)
		return status, body
	}

	// The kinds, once the watcher has checked them.
	var kinds usageKindsPage
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body := get("/admin/usagekinds")
		require.Equal(c, http.StatusOK, status, body)
		kinds = usageKindsPage{}
		require.NoError(c, json.Unmarshal([]byte(body), &kinds))
		checked := 0
		for _, k := range kinds.Items {
			if (k.Name == deployments || k.Name == functions || k.Name == missing) && (k.Ready || k.Reason != "the watcher has not checked it yet") {
				checked++
			}
		}
		assert.Equal(c, 3, checked, body)
	}, 30*time.Second, 100*time.Millisecond, "the watcher checked the three kinds")
	byName := map[string]int{}
	for i, k := range kinds.Items {
		byName[k.Name] = i
	}
	d, f, m := kinds.Items[byName[deployments]], kinds.Items[byName[functions]], kinds.Items[byName[missing]]
	assert.True(t, d.Ready)
	assert.Equal(t, "Deployments", d.DisplayName)
	assert.Equal(t, "deployments.apps", d.Resource)
	assert.True(t, f.Ready)
	assert.Equal(t, "functions.kubeless.io", f.Resource)
	assert.False(t, m.Ready)
	assert.Contains(t, m.Reason, "example.com", "the reason names what is not served")

	// The resources of a kind: the owned Deployment and the other
	// namespace's are left out.
	targets := func(kind, query string) (int, targetsPage, string) {
		status, body := get("/admin/usagekinds/" + kind + "/resources?namespace=" + s.Namespace + query)
		var p targetsPage
		if status == http.StatusOK {
			require.NoError(t, json.Unmarshal([]byte(body), &p), body)
		}
		return status, p, body
	}
	names := func(p targetsPage) []string {
		var out []string
		for _, i := range p.Items {
			out = append(out, i.Name)
			assert.Equal(t, s.Namespace, i.Namespace)
			assert.NotEmpty(t, i.UID)
		}
		return out
	}
	status, page, body := targets(deployments, "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []string{"web", "worker"}, names(page))
	assert.Empty(t, page.Continue)
	status, page, body = targets(functions, "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []string{"hello"}, names(page))

	// Page by page, with the API server's continue token; the page that
	// held the owned Deployment is shorter than its limit.
	var all []string
	query := "&limit=1"
	for range 4 {
		status, page, body = targets(deployments, query)
		require.Equal(t, http.StatusOK, status, body)
		assert.LessOrEqual(t, len(page.Items), 1)
		all = append(all, names(page)...)
		if page.Continue == "" {
			break
		}
		query = "&limit=1&continue=" + url.QueryEscape(page.Continue)
	}
	assert.Equal(t, []string{"web", "worker"}, all, "three pages of one, less the owned one")
	assert.Empty(t, page.Continue, "the last page has no continue token")

	// Refusals, each with a message.
	for _, c := range []struct {
		path   string
		status int
		says   string
	}{
		{"/admin/usagekinds/" + deployments + "/resources", http.StatusBadRequest, "namespace is required"},
		{"/admin/usagekinds/" + deployments + "/resources?namespace=" + s.Namespace + "&limit=0", http.StatusBadRequest, "is not a positive number"},
		{"/admin/usagekinds?limit=many", http.StatusBadRequest, "is not a positive number"},
		{"/admin/usagekinds/" + deployments + "/resources?namespace=" + s.Namespace + "&continue=garbage", http.StatusBadRequest, "continue"},
		{"/admin/usagekinds/" + s.Namespace + "-nobody/resources?namespace=" + s.Namespace, http.StatusNotFound, "does not exist"},
		{"/admin/usagekinds/" + missing + "/resources?namespace=" + s.Namespace, http.StatusConflict, "cannot be listed"},
	} {
		status, body := get(c.path)
		assert.Equal(t, c.status, status, "%s: %s", c.path, body)
		assert.Contains(t, body, c.says, c.path)
	}
	status, _, _ = testenv.HTTP(http.MethodGet, s.AdminURL+"/admin/usagekinds", "", &testenv.OSBCredentials, nil)
	assert.Equal(t, http.StatusUnauthorized, status, "the OSB credentials do not open the admin API")
	status, _, _ = testenv.HTTP(http.MethodGet, s.AdminURL+"/admin/usagekinds", "", &api.Credentials{}, nil)
	assert.Equal(t, http.StatusUnauthorized, status)

	// A Deployment the Function comes to own leaves the list.
	var web unstructured.Unstructured
	web.SetAPIVersion("apps/v1")
	web.SetKind("Deployment")
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "web"}, &web))
	web.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "kubeless.io/v1beta1", Kind: "Function", Name: fn.GetName(), UID: fn.GetUID()}})
	require.NoError(t, s.Kube.Client.Update(ctx, &web))
	status, page, body = targets(deployments, "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []string{"worker"}, names(page))
}

// TestUsageKindsContinueExpires: a page's continue token whose revision
// etcd has since compacted away (the API server compacts every five
// minutes) is the caller's to renew, on both endpoints: 410, saying so. The
// API server here has no watch cache, which would otherwise keep serving
// the page from its own copy for a while after the compaction.
func TestUsageKindsContinueExpires(t *testing.T) {
	sister := testenv.StartUncachedSister(t)
	ctx := context.Background()
	ns := sister.Namespace(t)
	for _, manifest := range []string{
		`{apiVersion: servicecatalog.kyma-project.io/v1alpha1, kind: UsageKind, metadata: {name: deployments},
		  spec: {displayName: Deployments, resource: {group: apps, kind: deployment, version: v1}, labelsPath: spec.template.metadata.labels}}`,
		`{apiVersion: servicecatalog.kyma-project.io/v1alpha1, kind: UsageKind, metadata: {name: statefulsets},
		  spec: {displayName: StatefulSets, resource: {group: apps, kind: statefulset, version: v1}, labelsPath: spec.template.metadata.labels}}`,
	} {
		require.NoError(t, sister.Client.Create(ctx, testenv.Decode(t, manifest)))
	}
	for _, name := range []string{"web", "worker"} {
		require.NoError(t, sister.Client.Create(ctx, testenv.Decode(t, fmt.Sprintf(`{apiVersion: apps/v1, kind: Deployment,
		  metadata: {name: %s, namespace: %s},
		  spec: {selector: {matchLabels: {app: %s}}, template: {metadata: {labels: {app: %s}}, spec: {containers: [{name: app, image: example.com/app}]}}}}`,
			name, ns, name, name))))
	}
	srv := httptest.NewServer((&api.Server{Kube: sister.Client, OSB: testenv.OSBCredentials, Admin: testenv.AdminCredentials,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).AdminHandler())
	t.Cleanup(srv.Close)
	get := func(path string) (int, page) {
		t.Helper()
		status, body, _ := testenv.HTTP(http.MethodGet, srv.URL+path, "", &testenv.AdminCredentials, nil)
		var p page
		require.NoError(t, json.Unmarshal([]byte(body), &p), body)
		return status, p
	}

	firstPages := map[string]string{}
	for _, path := range []string{"/admin/usagekinds?limit=1", "/admin/usagekinds/deployments/resources?namespace=" + ns + "&limit=1"} {
		status, p := get(path)
		require.Equal(t, http.StatusOK, status, path)
		require.NotEmpty(t, p.Continue, "%s has a second page", path)
		firstPages[path] = p.Continue
	}
	// A write after the tokens, so that compacting to the current revision
	// takes theirs away.
	require.NoError(t, sister.Client.Create(ctx, testenv.Decode(t, fmt.Sprintf(`{apiVersion: v1, kind: ConfigMap, metadata: {name: after-the-tokens, namespace: %s}}`, ns))))
	sister.CompactEtcd(t)
	for path, token := range firstPages {
		status, p := get(path + "&continue=" + url.QueryEscape(token))
		assert.Equal(t, http.StatusGone, status, path)
		assert.Contains(t, p.Description, "the continue token has expired; list again from the start", path)
	}
}

// page is what the usage kinds' endpoints answer: a page, or an error.
type page struct {
	Continue    string `json:"continue"`
	Description string `json:"description"`
}
