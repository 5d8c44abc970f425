package fairness_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quartermaster/qm/internal/fairness"
)

func TestTenant(t *testing.T) {
	for _, tc := range []struct{ name, namespace, org, want string }{
		{"a kubectl user's namespace", "team-a", "", "ns/team-a"},
		{"an OSB organization, whatever the broker's namespace", "brokers", "9b2c", "org/9b2c"},
		{"bounded", "brokers", strings.Repeat("x", 100), "org/" + strings.Repeat("x", 60)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, fairness.Tenant(tc.namespace, tc.org))
		})
	}
}

func TestOrganization(t *testing.T) {
	for _, tc := range []struct{ name, context, guid, want string }{
		{"Cloud Foundry", `{"platform": "cloudfoundry", "organization_guid": "org-1", "space_guid": "s"}`, "org-1", "org-1"},
		{"a Kubernetes platform: the namespace, not the cluster's ID", `{"platform": "kubernetes", "namespace": "shop", "clusterid": "c-1"}`, "c-1", "shop"},
		{"the request's alone", ``, "org-2", "org-2"},
		{"none", ``, "", ""},
		{"a context that is not an object", `[1]`, "org-3", "org-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, fairness.Organization([]byte(tc.context), tc.guid))
		})
	}
}

func TestWeight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   float32
	}{
		{"none: Temporal's default", nil, 0},
		{"absent", []string{"", ""}, 0},
		{"a namespace's tier", []string{"4", ""}, 4},
		{"a plan's and a namespace's multiply", []string{"4", "0.5"}, 2},
		{"unreadable counts as 1", []string{"four", "2"}, 2},
		{"zero, negative, NaN and infinity count as 1", []string{"0", "-3", "NaN", "+Inf"}, 0},
		{"clamped above, as Temporal does", []string{"100", "100"}, 1000},
		{"clamped below", []string{"0.0001"}, 0.001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == 0 {
				assert.Zero(t, fairness.Weight(tc.values...))
				return
			}
			assert.InEpsilon(t, tc.want, fairness.Weight(tc.values...), 1e-6)
		})
	}
}

func TestOrder(t *testing.T) {
	assert.Less(t, fairness.User, fairness.Follow, "users before what follows bindings")
	assert.Less(t, fairness.Follow, fairness.Background, "before mass updates and rotations")
	assert.Less(t, fairness.Background, fairness.Checks, "health checks last")
}
