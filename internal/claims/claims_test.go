package claims

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// TestAdmits is Primaza's constraints table: exclusions win, and a list
// with any exclusion admits every environment it does not exclude.
func TestAdmits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		envs   []string
		admits map[string]bool
	}{
		{"no constraints", nil, map[string]bool{"dev": true, "stage": true, "prod": true}},
		{"inclusions only", []string{"dev"}, map[string]bool{"dev": true, "stage": false, "prod": false}},
		{"an exclusion only", []string{"!prod"}, map[string]bool{"dev": true, "stage": true, "prod": false}},
		{"!prod with dev: dev is redundant, stage is in", []string{"!prod", "dev"}, map[string]bool{"dev": true, "stage": true, "prod": false}},
		{"an exclusion wins over the same inclusion", []string{"prod", "!prod"}, map[string]bool{"dev": true, "stage": true, "prod": false}},
		{"two exclusions", []string{"!prod", "!stage"}, map[string]bool{"dev": true, "stage": false, "prod": false}},
	} {
		for env, want := range tc.admits {
			c := &primazav1alpha1.Constraints{Environments: tc.envs}
			assert.Equal(t, want, Admits(c, env), "%s: %s", tc.name, env)
		}
	}
	assert.True(t, Admits(nil, "any"), "a service without constraints")
}

func service(name string, state primazav1alpha1.ServiceState, envs ...string) primazav1alpha1.RegisteredService {
	svc := primazav1alpha1.RegisteredService{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: primazav1alpha1.RegisteredServiceSpec{
			ServiceClassIdentity: []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "db"}, {Name: "provider", Value: "aws"}},
			ServiceEndpointDefinition: []primazav1alpha1.ServiceEndpointDefinitionItem{
				{Name: "password", ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: "s", Key: "k"}}, {Name: "host", Value: ptr.To("db")},
			},
		},
		Status: primazav1alpha1.RegisteredServiceStatus{State: state},
	}
	if envs != nil {
		svc.Spec.Constraints = &primazav1alpha1.Constraints{Environments: envs}
	}
	return svc
}

// TestCatalog: an environment's catalog lists the Available, unclaimed
// services its constraints admit, with keys and no values.
func TestCatalog(t *testing.T) {
	claimed := service("claimed", primazav1alpha1.ServiceAvailable)
	claimed.Status.ClaimRef = &primazav1alpha1.ClaimReference{Name: "c", UID: "u"}
	services := []primazav1alpha1.RegisteredService{
		service("everywhere", primazav1alpha1.ServiceAvailable),
		service("dev-only", primazav1alpha1.ServiceAvailable, "dev"),
		service("not-prod", primazav1alpha1.ServiceAvailable, "!prod", "dev"),
		service("prod-only", primazav1alpha1.ServiceAvailable, "prod"),
		service("down", primazav1alpha1.ServiceUnreachable),
		service("unchecked", primazav1alpha1.ServiceUnknown),
		service("taken", primazav1alpha1.ServiceClaimed),
		claimed,
	}
	names := func(env string) []string {
		var out []string
		for _, s := range Catalog(env, services) {
			out = append(out, s.Name)
		}
		return out
	}
	assert.Equal(t, []string{"dev-only", "everywhere", "not-prod"}, names("dev"))
	assert.Equal(t, []string{"everywhere", "not-prod"}, names("stage"))
	assert.Equal(t, []string{"everywhere", "prod-only"}, names("prod"))

	entry := Catalog("prod", services)[0]
	assert.Equal(t, []string{"host", "password"}, entry.ServiceEndpointDefinitionKeys, "keys, sorted, never values")
	assert.Equal(t, []primazav1alpha1.ServiceClassIdentityItem{{Name: "provider", Value: "aws"}, {Name: "type", Value: "db"}}, entry.ServiceClassIdentity)
	assert.Empty(t, Catalog("prod", nil))
	assert.NotNil(t, Catalog("prod", nil), "an empty catalog lists nothing, not null")
}

func TestEnvironments(t *testing.T) {
	services := []primazav1alpha1.RegisteredService{
		service("a", primazav1alpha1.ServiceAvailable, "!prod", "dev"),
		service("b", primazav1alpha1.ServiceAvailable),
		service("c", primazav1alpha1.ServiceAvailable, "dev"),
	}
	claims := []primazav1alpha1.ServiceClaim{{Spec: primazav1alpha1.ServiceClaimSpec{EnvironmentTag: "stage"}}, {}}
	assert.Equal(t, []string{"dev", "prod", "stage"}, Environments(services, claims))
	assert.Empty(t, Environments(nil, nil))
}

// TestClaimedByLabels: a catalog lists under claimedByLabels the services
// of its environment that a claim holds for the workloads its selector
// matches, with that selector; a claim by name, or no claim, lists none.
func TestClaimedByLabels(t *testing.T) {
	heldBy := func(svc primazav1alpha1.RegisteredService, claim string) primazav1alpha1.RegisteredService {
		svc.Status.ClaimRef = &primazav1alpha1.ClaimReference{Name: claim, UID: types.UID("uid-" + claim)}
		return svc
	}
	claim := func(name string, app *primazav1alpha1.ApplicationSelector) primazav1alpha1.ServiceClaim {
		return primazav1alpha1.ServiceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec: primazav1alpha1.ServiceClaimSpec{Application: app}}
	}
	shop := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}
	services := []primazav1alpha1.RegisteredService{
		heldBy(service("by-labels", primazav1alpha1.ServiceClaimed, "dev"), "shop"),
		heldBy(service("by-labels-prod", primazav1alpha1.ServiceClaimed, "prod"), "shop"),
		heldBy(service("by-name", primazav1alpha1.ServiceClaimed), "orders"),
		heldBy(service("by-nothing", primazav1alpha1.ServiceClaimed), "bare"),
		heldBy(service("by-a-gone-claim", primazav1alpha1.ServiceClaimed), "gone"),
		service("free", primazav1alpha1.ServiceAvailable),
	}
	claims := []primazav1alpha1.ServiceClaim{
		claim("shop", &primazav1alpha1.ApplicationSelector{APIVersion: "apps/v1", Kind: "Deployment", Selector: shop}),
		claim("orders", &primazav1alpha1.ApplicationSelector{APIVersion: "apps/v1", Kind: "Deployment", Name: "orders"}),
		claim("bare", nil),
	}
	got := ClaimedByLabels("dev", services, claims)
	if assert.Len(t, got, 1) {
		assert.Equal(t, "by-labels", got[0].Name)
		assert.Equal(t, shop, got[0].Labels, "with the claim's selector")
		assert.Equal(t, []string{"host", "password"}, got[0].ServiceEndpointDefinitionKeys, "keys, never values")
	}
	assert.Equal(t, "by-labels-prod", ClaimedByLabels("prod", services, claims)[0].Name, "the environment's constraints apply")
	assert.NotNil(t, ClaimedByLabels("stage", nil, nil), "none lists nothing, not null")
}

// TestCheckedOnly: a health check's bookkeeping wakes no claim; a change
// of state, of hold, of spec, of labels or a deletion does.
func TestCheckedOnly(t *testing.T) {
	t0 := metav1.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	base := primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Generation: 1, Labels: map[string]string{"tier": "db"}}}
	base.Status = primazav1alpha1.RegisteredServiceStatus{State: primazav1alpha1.ServiceClaimed, ObservedGeneration: 1,
		ClaimRef:    &primazav1alpha1.ClaimReference{Name: "app", UID: "u-1"},
		HealthCheck: &primazav1alpha1.HealthCheckStatus{LastResult: primazav1alpha1.CheckSucceeded, LastCheckTime: &t0, ConsecutiveSuccesses: 1},
		Conditions:  []metav1.Condition{{Type: "Healthy", Status: metav1.ConditionTrue, Reason: "CheckSucceeded", LastTransitionTime: t0}},
	}
	for _, tc := range []struct {
		name   string
		change func(*primazav1alpha1.RegisteredService)
		only   bool
	}{
		{"nothing", func(*primazav1alpha1.RegisteredService) {}, true},
		{"the check time refreshed", func(s *primazav1alpha1.RegisteredService) {
			s.Status.HealthCheck.LastCheckTime = &metav1.Time{Time: t0.Add(10 * time.Minute)}
		}, true},
		{"a failure counted, the state kept", func(s *primazav1alpha1.RegisteredService) {
			s.Status.HealthCheck.LastResult, s.Status.HealthCheck.ConsecutiveFailures = primazav1alpha1.CheckFailed, 1
			s.Status.Conditions[0].Message = "refused"
		}, true},
		{"the state changed", func(s *primazav1alpha1.RegisteredService) { s.Status.State = primazav1alpha1.ServiceUnreachable }, false},
		{"the hold let go", func(s *primazav1alpha1.RegisteredService) { s.Status.ClaimRef = nil }, false},
		{"the spec changed", func(s *primazav1alpha1.RegisteredService) { s.Generation = 2 }, false},
		{"a label changed", func(s *primazav1alpha1.RegisteredService) { s.Labels = map[string]string{"tier": "cache"} }, false},
		{"deleted", func(s *primazav1alpha1.RegisteredService) { s.DeletionTimestamp = &t0 }, false},
	} {
		after := base.DeepCopy()
		tc.change(after)
		assert.Equal(t, tc.only, CheckedOnly(&base, after), tc.name)
	}
}

func TestSecretsOf(t *testing.T) {
	ref := func(name, key string) primazav1alpha1.ServiceEndpointDefinitionItem {
		return primazav1alpha1.ServiceEndpointDefinitionItem{Name: key, ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: name, Key: key}}
	}
	value := "db.example"
	for _, tc := range []struct {
		name  string
		items []primazav1alpha1.ServiceEndpointDefinitionItem
		want  []string
	}{
		{name: "values in clear read no Secret", items: []primazav1alpha1.ServiceEndpointDefinitionItem{{Name: "host", Value: &value}}},
		{name: "each Secret once, in order", items: []primazav1alpha1.ServiceEndpointDefinitionItem{
			ref("creds", "user"), {Name: "host", Value: &value}, ref("creds", "password"), ref("ca", "ca.crt")}, want: []string{"creds", "ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &primazav1alpha1.RegisteredService{Spec: primazav1alpha1.RegisteredServiceSpec{ServiceEndpointDefinition: tc.items}}
			assert.Equal(t, tc.want, SecretsOf(svc))
		})
	}
	assert.Nil(t, SecretsOf(&primazav1alpha1.ServiceClaim{}), "not a service")
}
