package claims

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

func claim(env string, keys []string, identity ...string) *primazav1alpha1.ServiceClaim {
	c := &primazav1alpha1.ServiceClaim{Spec: primazav1alpha1.ServiceClaimSpec{ServiceEndpointDefinitionKeys: keys, EnvironmentTag: env}}
	for i := 0; i+1 < len(identity); i += 2 {
		c.Spec.ServiceClassIdentity = append(c.Spec.ServiceClassIdentity, primazav1alpha1.ServiceClassIdentityItem{Name: identity[i], Value: identity[i+1]})
	}
	return c
}

// TestMatch: a subset match on the class identity, every endpoint key
// defined, and the environment admitted.
func TestMatch(t *testing.T) {
	svc := service("db", primazav1alpha1.ServiceAvailable, "!prod")
	for _, tc := range []struct {
		name  string
		claim *primazav1alpha1.ServiceClaim
		want  Mismatch
	}{
		{"a subset of the identity", claim("dev", []string{"host"}, "type", "db"), Matches},
		{"the whole identity", claim("dev", []string{"host", "password"}, "type", "db", "provider", "aws"), Matches},
		{"another value", claim("dev", []string{"host"}, "type", "queue"), WrongClass},
		{"a pair the service lacks", claim("dev", []string{"host"}, "type", "db", "region", "eu"), WrongClass},
		{"a missing key", claim("dev", []string{"host", "port"}, "type", "db"), MissingKeys},
		{"an excluded environment", claim("prod", []string{"host"}, "type", "db"), NotAllowed},
		{"no environment", claim("", []string{"host"}, "type", "db"), Matches},
	} {
		assert.Equal(t, tc.want, Match(tc.claim, &svc), tc.name)
	}
	byContext := claim("", []string{"host"}, "type", "db")
	byContext.Spec.ApplicationClusterContext = &primazav1alpha1.ApplicationClusterContext{ClusterEnvironmentName: "prod", Namespace: "apps"}
	assert.Equal(t, NotAllowed, Match(byContext, &svc), "the cluster context's environment is matched")
}

// TestCandidatesOrder: claimable matching services, the best SLA first,
// then the oldest, then by name.
func TestCandidatesOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(name, sla string, age time.Duration, state primazav1alpha1.ServiceState) primazav1alpha1.RegisteredService {
		s := service(name, state)
		s.Spec.SLA = sla
		s.CreationTimestamp = metav1.NewTime(t0.Add(-age))
		return s
	}
	services := []primazav1alpha1.RegisteredService{
		at("plain-old", "", 9*time.Hour, primazav1alpha1.ServiceAvailable),
		at("silver", "silver", time.Hour, primazav1alpha1.ServiceAvailable),
		at("gold-new", "Gold", time.Hour, primazav1alpha1.ServiceAvailable),
		at("gold-old", "gold", 2*time.Hour, primazav1alpha1.ServiceAvailable),
		at("gold-old-b", "gold", 2*time.Hour, primazav1alpha1.ServiceAvailable),
		at("custom", "diamond", time.Hour, primazav1alpha1.ServiceAvailable),
		at("platinum-down", "platinum", time.Hour, primazav1alpha1.ServiceUnreachable),
	}
	order := func(uid string) []string {
		c := claim("dev", []string{"host"}, "type", "db")
		c.UID = types.UID(uid)
		var names []string
		for _, s := range Candidates(c, services) {
			names = append(names, s.Name)
		}
		return names
	}
	firsts := map[string]int{}
	for i := range 20 {
		names := order(fmt.Sprint("claim-", i))
		assert.ElementsMatch(t, []string{"gold-old", "gold-old-b"}, names[:2], "the oldest gold services first")
		assert.Equal(t, []string{"gold-new", "silver", "custom", "plain-old"}, names[2:], "then by SLA and age")
		assert.Equal(t, names, order(fmt.Sprint("claim-", i)), "one claim's order is fixed")
		firsts[names[0]]++
	}
	assert.Len(t, firsts, 2, "claims spread over alike services: %v", firsts)
}

func TestWhyPending(t *testing.T) {
	taken := service("taken", primazav1alpha1.ServiceClaimed)
	taken.Status.ClaimRef = &primazav1alpha1.ClaimReference{Name: "c", UID: "u"}
	services := []primazav1alpha1.RegisteredService{
		taken, service("down", primazav1alpha1.ServiceUnreachable), service("prod", primazav1alpha1.ServiceAvailable, "prod"),
		service("queue", primazav1alpha1.ServiceAvailable),
	}
	services[3].Spec.ServiceClassIdentity[0].Value = "queue"
	got := WhyPending(claim("dev", []string{"host"}, "type", "db"), services)
	assert.Equal(t, "no Available service of class type=db defines host for environment dev "+
		"(of 3 of that class: 1 are not allowed in the environment, 1 are claimed, 1 are not Available)", got)
	assert.Equal(t, "no Available service of class type=db defines port for environment dev (of 3 of that class: 3 lack endpoint keys)",
		WhyPending(claim("dev", []string{"port"}, "type", "db"), services))
}

// TestBinding: the claimed keys with their values, secret ones read, and
// every class-identity pair.
func TestBinding(t *testing.T) {
	svc := service("db", primazav1alpha1.ServiceAvailable)
	read := func(ref *primazav1alpha1.SecretKeyRef) ([]byte, error) {
		assert.Equal(t, primazav1alpha1.SecretKeyRef{Name: "s", Key: "k"}, *ref)
		return []byte("pa55"), nil
	}
	data, err := Binding(claim("dev", []string{"host", "password"}, "type", "db"), &svc, read)
	require.NoError(t, err)
	assert.Equal(t, map[string][]byte{"host": []byte("db"), "password": []byte("pa55"), "type": []byte("db"), "provider": []byte("aws")}, data)

	only, err := Binding(claim("dev", []string{"host"}, "type", "db"), &svc, nil)
	require.NoError(t, err)
	assert.NotContains(t, only, "password", "only the keys the claim asks for")

	_, err = Binding(claim("dev", []string{"password"}, "type", "db"), &svc, func(*primazav1alpha1.SecretKeyRef) ([]byte, error) {
		return nil, errors.New(`Secret "s" has no key "k"`)
	})
	assert.EqualError(t, err, `endpoint key "password" of service db: Secret "s" has no key "k"`)
}
