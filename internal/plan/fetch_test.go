package plan_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/testenv"
)

// templateServer serves a gotemplate at /provision.yaml (its body can be
// changed), a chart at /chart.tgz, a large body at /big, a slow one at
// /slow and a 500 at /broken; it counts the requests.
type templateServer struct {
	*httptest.Server
	body atomic.Value
	hits atomic.Int32
}

func newTemplateServer(t *testing.T) *templateServer {
	t.Helper()
	ts := &templateServer{}
	ts.body.Store("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .instance.metadata.name }}-from-url}\n")
	archive := testenv.ChartArchive(t)
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.hits.Add(1)
		switch r.URL.Path {
		case "/provision.yaml":
			_, _ = w.Write([]byte(ts.body.Load().(string)))
		case "/chart.tgz":
			_, _ = w.Write(archive)
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", 2048)))
		case "/slow":
			time.Sleep(2 * time.Second) // a server slower than the fetch allows
		case "/elsewhere":
			http.Redirect(w, r, "http://example.invalid/provision.yaml", http.StatusFound)
		default:
			http.Error(w, "broken", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

func urlPlan(generation int64, typ osbv1alpha1.TemplateType, u string) *osbv1alpha1.SFPlan {
	return &osbv1alpha1.SFPlan{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID("plan-uid"), Generation: generation},
		Spec: osbv1alpha1.SFPlanSpec{Name: "p", Templates: []osbv1alpha1.TemplateSpec{
			{Action: osbv1alpha1.ActionProvision, Type: typ, URL: u},
		}},
	}
}

func TestFetchBounds(t *testing.T) {
	ts := newTemplateServer(t)
	host := mustHost(t, ts.URL)
	f := &plan.Fetcher{AllowedHosts: []string{host}, MaxBytes: 1024, Timeout: time.Second}
	for _, tc := range []struct {
		name, path, hosts string
		permanent         bool // a *TemplateError, not retried
		message           string
	}{
		{"a host not allowed", "/provision.yaml", "templates.example", true, `host "` + host + `" is not among the allowed template hosts (templates.example)`},
		{"a redirect to a host not allowed", "/elsewhere", "", false, `host "example.invalid" is not among the allowed template hosts`},
		{"a body over the bound", "/big", "", true, "the body is larger than 1024 bytes"},
		{"a slow server", "/slow", "", false, "Client.Timeout exceeded"},
		{"a server error", "/broken", "", false, "500 Internal Server Error"},
		{"a scheme other than http(s)", "oci://registry.example/charts/tenant", "", true, "url oci://registry.example/charts/tenant: only http and https urls are fetched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fetcher := f
			if tc.hosts != "" {
				fetcher = &plan.Fetcher{AllowedHosts: []string{tc.hosts}}
			}
			u := ts.URL + tc.path
			if !strings.HasPrefix(tc.path, "/") {
				u = tc.path
			}
			p := urlPlan(1, osbv1alpha1.TemplateGo, u)
			_, err := fetcher.Fetch(p, &p.Spec.Templates[0])
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.message)
			var te *plan.TemplateError
			assert.Equal(t, tc.permanent, errors.As(err, &te), "permanent: %v", err)
		})
	}
}

// TestTemplateFromURL renders a gotemplate and a chart fetched from a url;
// a plan version fetches once, and a new version of the plan fetches again.
func TestTemplateFromURL(t *testing.T) {
	ts := newTemplateServer(t)
	f := &plan.Fetcher{}
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Name: "db-1", Namespace: "tenants"}}
	render := func(p *osbv1alpha1.SFPlan) []string {
		t.Helper()
		s := &plan.Subject{Service: &osbv1alpha1.SFService{}, Plan: p, Instance: inst, Registry: registry.New(registry.Instance, nil), Fetcher: f}
		values, err := s.Values(crds.NewScheme())
		require.NoError(t, err)
		objs, err := s.Objects(osbv1alpha1.ActionProvision, values)
		require.NoError(t, err)
		var names []string
		for _, o := range objs {
			names = append(names, o.GetKind()+"/"+o.GetName())
		}
		return names
	}

	v1 := urlPlan(1, osbv1alpha1.TemplateGo, ts.URL+"/provision.yaml")
	assert.Equal(t, []string{"ConfigMap/db-1-from-url"}, render(v1))
	ts.body.Store("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .instance.metadata.name }}-changed}\n")
	assert.Equal(t, []string{"ConfigMap/db-1-from-url"}, render(v1), "one plan version renders the body it fetched first")
	assert.EqualValues(t, 1, ts.hits.Load())
	v2 := urlPlan(2, osbv1alpha1.TemplateGo, ts.URL+"/provision.yaml")
	assert.Equal(t, []string{"ConfigMap/db-1-changed"}, render(v2), "a plan change fetches again")
	assert.EqualValues(t, 2, ts.hits.Load())

	chart := urlPlan(1, osbv1alpha1.TemplateHelm, ts.URL+"/chart.tgz")
	assert.Equal(t, []string{"ConfigMap/db-1-tenant", "ResourceQuota/db-1-tenant"}, render(chart), "a helm chart from a url renders too")

	// Registration checks what it can without fetching.
	assert.NoError(t, plan.Check(v1))
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Hostname()
}
