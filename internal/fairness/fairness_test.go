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
	for _, tc := range []struct{ name, context, want string }{
		{"Cloud Foundry", `{"platform": "cloudfoundry", "organization_guid": "org-1", "space_guid": "s"}`, "org-1"},
		{"a Kubernetes platform", `{"platform": "kubernetes", "namespace": "shop"}`, "shop"},
		{"none", ``, ""},
		{"not an object", `[1]`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, fairness.Organization([]byte(tc.context)))
		})
	}
}

func TestOrder(t *testing.T) {
	assert.Less(t, fairness.User, fairness.Follow, "users before what follows bindings")
	assert.Less(t, fairness.Follow, fairness.Background, "before mass updates and rotations")
	assert.Less(t, fairness.Background, fairness.Checks, "health checks last")
}
