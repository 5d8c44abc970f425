package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// BenchmarkClaimsFloor puts BenchmarkClaims' target in proportion. On one
// bare API server, with no Temporal and no logic in between, the same 16
// clients make first the API calls of N provisions (BenchmarkKubernetesFloor's
// set), then those of N claims: the user's create of the claim (through
// its finalizer's admission policy), a fresh read of it, the hold of a
// service (its status, under the resourceVersion read), the binding Secret
// and the claim's status. Two informers watch each kind, as the watcher's
// and the worker's caches do. The ratio of the two sets' CPU is what the
// API server and etcd make a claim cost beside a provision, whatever
// Quartermaster does around them.
func BenchmarkClaimsFloor(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_CLAIMS", 1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, ns := watchedNamespace(ctx, b, 2)
	informers, err := cache.New(kube.Config, cache.Options{Scheme: crds.NewScheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(b, err)
	for range 2 {
		for _, obj := range []ctrlclient.Object{&primazav1alpha1.ServiceClaim{}, &primazav1alpha1.RegisteredService{}} {
			_, err := informers.GetInformer(ctx, obj)
			require.NoError(b, err)
		}
	}
	go func() { _ = informers.Start(ctx) }()
	require.True(b, informers.WaitForCacheSync(ctx))
	c := kube.Client

	services := make([]*primazav1alpha1.RegisteredService, n)
	testenv.Parallel(b, n, func(i int) error {
		svc := &primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%05d", i), Namespace: ns}}
		svc.Spec.ServiceClassIdentity = []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}}
		svc.Spec.ServiceEndpointDefinition = []primazav1alpha1.ServiceEndpointDefinitionItem{{Name: "host", Value: new(svc.Name + ".example")}}
		services[i] = svc
		return c.Create(ctx, svc)
	})

	measure := func(set func(i int) error) (float64, time.Duration) {
		cpuBefore := testenv.CPU()
		start := time.Now()
		testenv.Parallel(b, n, set)
		elapsed := time.Since(start)
		return float64(n) / elapsed.Seconds(), testenv.CPUUsed(cpuBefore, testenv.CPU(), n)
	}
	b.ResetTimer()
	provRate, provCPU := measure(func(i int) error { return provisionFloorSet(ctx, c, ns, fmt.Sprintf("floor-%05d", i), false) })
	claimRate, claimCPU := measure(func(i int) error { return claimFloorSet(ctx, c, services[i], fmt.Sprintf("claim-%05d", i)) })
	b.StopTimer()

	b.ReportMetric(claimRate, "claim-sets/s")
	b.ReportMetric(claimCPU.Seconds()/provCPU.Seconds(), "claim/provision-cpu")
	fmt.Printf("\nKubernetes floors of a provision and of a claim, N=%d, %d clients, one bare API server:\n"+
		"  provision (create, get, Secret, apply, status)            %7.1f sets/s, %5.1fms CPU per set\n"+
		"  claim (create, get, service's status, Secret, status)     %7.1f sets/s, %5.1fms CPU per set (%.2fx a provision's)\n",
		n, testenv.BenchClients, provRate, provCPU.Seconds()*1000, claimRate, claimCPU.Seconds()*1000, claimCPU.Seconds()/provCPU.Seconds())
	if provisionCPU > 0 {
		// A claim that cost what a provision does but for its Kubernetes
		// floor: the most claims/s can be beside provisions/s.
		best := provisionCPU.Seconds() / (provisionCPU - provCPU + claimCPU).Seconds()
		fmt.Printf("  with the same run's provision (%.1fms per instance), claims/s can reach at most %.2fx provisions/s\n"+
			"  even if a claim cost Temporal and Quartermaster no more than a provision does\n", provisionCPU.Seconds()*1000, best)
	}
}

// claimFloorSet makes the API calls one claim must make, for claim name
// held on svc, with no logic in between.
func claimFloorSet(ctx context.Context, c ctrlclient.Client, svc *primazav1alpha1.RegisteredService, name string) error {
	claim := &primazav1alpha1.ServiceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svc.Namespace}}
	claim.Spec.ServiceClassIdentity = []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}}
	claim.Spec.ServiceEndpointDefinitionKeys = []string{"host"}
	claim.Spec.EnvironmentTag = "dev"
	if err := c.Create(ctx, claim); err != nil {
		return err
	}
	if err := c.Get(ctx, ctrlclient.ObjectKeyFromObject(claim), claim); err != nil {
		return err
	}
	base := svc.DeepCopy()
	svc.Status.State = primazav1alpha1.ServiceClaimed
	svc.Status.ClaimRef = &primazav1alpha1.ClaimReference{Name: claim.Name, UID: claim.UID}
	if err := c.Status().Patch(ctx, svc, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svc.Namespace},
		Data: map[string][]byte{"host": []byte(svc.Name + ".example"), "type": []byte("psqlserver")}}
	if err := c.Create(ctx, secret); err != nil {
		return err
	}
	base2 := claim.DeepCopy()
	claim.Status.State, claim.Status.ObservedGeneration = primazav1alpha1.ClaimResolved, claim.Generation
	claim.Status.RegisteredService, claim.Status.RegisteredServiceUID = svc.Name, svc.UID
	claim.Status.Binding = &primazav1alpha1.BindingReference{Name: secret.Name}
	return c.Status().Patch(ctx, claim, ctrlclient.MergeFrom(base2))
}
