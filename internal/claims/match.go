package claims

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// Environment is the environment a claim is made from: its environmentTag,
// or its application's cluster environment.
func Environment(c *primazav1alpha1.ServiceClaim) string {
	if ctx := c.Spec.TargetContext(); ctx != nil {
		return ctx.ClusterEnvironmentName
	}
	return c.Spec.TargetEnvironmentTag()
}

// Mismatch says why a service does not match a claim; "" when it does.
type Mismatch string

const (
	Matches     Mismatch = ""
	WrongClass  Mismatch = "class"
	MissingKeys Mismatch = "keys"
	NotAllowed  Mismatch = "environment"
)

// Match says whether svc is what claim asks for, whatever its state: its
// class identity holds every pair of the claim's (a subset match), it
// defines every endpoint key the claim needs, and its constraints admit
// the claim's environment.
func Match(claim *primazav1alpha1.ServiceClaim, svc *primazav1alpha1.RegisteredService) Mismatch {
	for _, want := range claim.Spec.ServiceClassIdentity {
		if !slices.Contains(svc.Spec.ServiceClassIdentity, want) {
			return WrongClass
		}
	}
	for _, key := range claim.Spec.ServiceEndpointDefinitionKeys {
		if !slices.ContainsFunc(svc.Spec.ServiceEndpointDefinition, func(i primazav1alpha1.ServiceEndpointDefinitionItem) bool { return i.Name == key }) {
			return MissingKeys
		}
	}
	if env := Environment(claim); env != "" && !Admits(svc.Spec.Constraints, env) {
		return NotAllowed
	}
	return Matches
}

// slaRank orders the service levels a claim prefers, best first; any
// other level comes after them, and no level last.
var slaRank = []string{"platinum", "gold", "silver", "bronze"}

func rank(sla string) int {
	if sla == "" {
		return len(slaRank) + 1
	}
	if i := slices.Index(slaRank, strings.ToLower(sla)); i >= 0 {
		return i
	}
	return len(slaRank)
}

// Candidates are the services a claim may take now, in the order it tries
// them: claimable and matching, the best SLA first (platinum, gold, silver,
// bronze, any other, none); among services of one SLA, in an order drawn
// from the claim's UID. The order is fixed for a claim, and claims spread
// evenly over alike services: an order every claim shares (the oldest
// first) would send every claim made at once to the same service, and all
// but one of them on to the next.
func Candidates(claim *primazav1alpha1.ServiceClaim, services []primazav1alpha1.RegisteredService) []*primazav1alpha1.RegisteredService {
	type candidate struct {
		svc  *primazav1alpha1.RegisteredService
		rank int
		key  uint64
	}
	var cs []candidate
	for i := range services {
		if svc := &services[i]; Claimable(svc) && Match(claim, svc) == Matches {
			cs = append(cs, candidate{svc, rank(svc.Spec.SLA), spread(claim.UID, svc.Name)})
		}
	}
	slices.SortFunc(cs, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.key, b.key), strings.Compare(a.svc.Name, b.svc.Name))
	})
	out := make([]*primazav1alpha1.RegisteredService, len(cs))
	for i, c := range cs {
		out[i] = c.svc
	}
	return out
}

// Best is the first of Candidates that skip does not rule out (nil if
// none), found in one pass over services rather than by sorting them all:
// the allocator picks one service per claim from a namespace's thousand.
func Best(claim *primazav1alpha1.ServiceClaim, services []primazav1alpha1.RegisteredService, skip func(name string) bool) *primazav1alpha1.RegisteredService {
	var best *primazav1alpha1.RegisteredService
	var bestRank int
	var bestKey uint64
	for i := range services {
		svc := &services[i]
		if skip(svc.Name) || !Claimable(svc) || Match(claim, svc) != Matches {
			continue
		}
		r, k := rank(svc.Spec.SLA), spread(claim.UID, svc.Name)
		if best == nil || cmp.Or(cmp.Compare(r, bestRank), cmp.Compare(k, bestKey), strings.Compare(svc.Name, best.Name)) < 0 {
			best, bestRank, bestKey = svc, r, k
		}
	}
	return best
}

// spread orders alike services for one claim.
func spread(claim types.UID, service string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(claim))
	h.Write([]byte{0})
	h.Write([]byte(service))
	return h.Sum64()
}

// WhyPending says why no service can be taken: how many services fall
// short on each count, naming what the claim asks for.
func WhyPending(claim *primazav1alpha1.ServiceClaim, services []primazav1alpha1.RegisteredService) string {
	counts := map[Mismatch]int{}
	held, unhealthy := 0, 0
	for i := range services {
		svc := &services[i]
		m := Match(claim, svc)
		counts[m]++
		switch {
		case m != Matches:
		case svc.Status.ClaimRef != nil || svc.Status.State == primazav1alpha1.ServiceClaimed:
			held++
		case !Claimable(svc):
			unhealthy++
		}
	}
	var class []string
	for _, p := range claim.Spec.ServiceClassIdentity {
		class = append(class, p.Name+"="+p.Value)
	}
	msg := fmt.Sprintf("no Available service of class %s defines %s", strings.Join(class, ","), strings.Join(claim.Spec.ServiceEndpointDefinitionKeys, ", "))
	if env := Environment(claim); env != "" {
		msg += " for environment " + env
	}
	var why []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{counts[MissingKeys], "lack endpoint keys"},
		{counts[NotAllowed], "are not allowed in the environment"},
		{held, "are claimed"},
		{unhealthy, "are not Available"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(why) > 0 {
		msg += fmt.Sprintf(" (of %d of that class: %s)", len(services)-counts[WrongClass], strings.Join(why, ", "))
	}
	return msg
}

// Binding is what a claim's binding Secret holds: every endpoint key the
// claim asks for, with its value, and every class-identity pair of the
// service (so that type and provider reach the application, as in
// Primaza). secret reads a valueFromSecret; a value it cannot find is an
// error that names the Secret and key, never a value.
func Binding(claim *primazav1alpha1.ServiceClaim, svc *primazav1alpha1.RegisteredService, secret func(*primazav1alpha1.SecretKeyRef) ([]byte, error)) (map[string][]byte, error) {
	data := map[string][]byte{}
	for _, p := range svc.Spec.ServiceClassIdentity {
		data[p.Name] = []byte(p.Value)
	}
	for _, key := range claim.Spec.ServiceEndpointDefinitionKeys {
		i := slices.IndexFunc(svc.Spec.ServiceEndpointDefinition, func(i primazav1alpha1.ServiceEndpointDefinitionItem) bool { return i.Name == key })
		if i < 0 {
			return nil, fmt.Errorf("service %s does not define %q", svc.Name, key)
		}
		switch item := svc.Spec.ServiceEndpointDefinition[i]; {
		case item.Value != nil:
			data[key] = []byte(*item.Value)
		case item.ValueFromSecret != nil:
			v, err := secret(item.ValueFromSecret)
			if err != nil {
				return nil, fmt.Errorf("endpoint key %q of service %s: %w", key, svc.Name, err)
			}
			data[key] = v
		}
	}
	return data, nil
}
