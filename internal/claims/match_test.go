package claims

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestCandidatesOrder: claimable matching services, the best SLA first;
// within an SLA, an order fixed for each claim that spreads claims over
// the services.
func TestCandidatesOrder(t *testing.T) {
	with := func(name, sla string, state primazav1alpha1.ServiceState) primazav1alpha1.RegisteredService {
		s := service(name, state)
		s.Spec.SLA = sla
		return s
	}
	services := []primazav1alpha1.RegisteredService{
		with("plain", "", primazav1alpha1.ServiceAvailable),
		with("silver", "silver", primazav1alpha1.ServiceAvailable),
		with("gold-a", "Gold", primazav1alpha1.ServiceAvailable),
		with("gold-b", "gold", primazav1alpha1.ServiceAvailable),
		with("gold-c", "gold", primazav1alpha1.ServiceAvailable),
		with("custom", "diamond", primazav1alpha1.ServiceAvailable),
		with("platinum-down", "platinum", primazav1alpha1.ServiceUnreachable),
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
	for i := range 30 {
		names := order(fmt.Sprint("claim-", i))
		assert.ElementsMatch(t, []string{"gold-a", "gold-b", "gold-c"}, names[:3], "the gold services first")
		assert.Equal(t, []string{"silver", "custom", "plain"}, names[3:], "then by SLA")
		assert.Equal(t, names, order(fmt.Sprint("claim-", i)), "one claim's order is fixed")
		firsts[names[0]]++
	}
	assert.Len(t, firsts, 3, "claims spread over the gold services: %v", firsts)
}

// TestBestIsTheFirstCandidate: Best is the first of Candidates that is not
// skipped, for any claim and whatever is skipped.
func TestBestIsTheFirstCandidate(t *testing.T) {
	var services []primazav1alpha1.RegisteredService
	for i, sla := range []string{"", "gold", "gold", "silver", "gold", "", "platinum", "bronze", "gold", "custom"} {
		s := service(fmt.Sprint("db-", i), primazav1alpha1.ServiceAvailable)
		s.Spec.SLA = sla
		services = append(services, s)
	}
	services[6].Status.State = primazav1alpha1.ServiceUnreachable
	for i := range 20 {
		c := claim("dev", []string{"host"}, "type", "db")
		c.UID = types.UID(fmt.Sprint("claim-", i))
		candidates := Candidates(c, services)
		for skipped := range len(candidates) + 1 {
			skip := map[string]bool{}
			for _, s := range candidates[:skipped] {
				skip[s.Name] = true
			}
			got := Best(c, services, func(name string) bool { return skip[name] })
			if skipped == len(candidates) {
				assert.Nil(t, got, "claim %d, every candidate skipped", i)
				continue
			}
			require.NotNil(t, got, "claim %d, %d skipped", i, skipped)
			assert.Equal(t, candidates[skipped].Name, got.Name, "claim %d, %d skipped", i, skipped)
		}
	}
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
