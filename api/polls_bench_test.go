package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
)

// BenchmarkOSBPollsAtScale measures last_operation polls with many
// instances in the API's cache (QM_BENCH_POLL_INSTANCES, default 10,000),
// each poll for another instance picked at random, as platforms polling a
// large fleet send them; beside it the catalog's rate in the same run. The
// instances are written as provisioned instances look (state, conditions,
// applied spec, resources) without running their provisions: the polls
// are what is measured. Target: last_operation at ≥ 0.5× the catalog's
// request rate, p99 ≤ 20 ms.
func BenchmarkOSBPollsAtScale(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_POLL_INSTANCES", 10000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := testenv.Start(b, testenv.Parts{API: true, FileTemporal: true, APILogger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	planID := s.Plan("one-configmap", "  manager: {async: true}", testenv.Templates("one-configmap"))

	start := time.Now()
	ids := make([]string, n)
	testenv.Parallel(b, n, func(i int) error {
		ids[i] = fmt.Sprintf("poll-%05d", i)
		return provisioned(ctx, s, ids[i], s.ServiceID, planID)
	})
	written := time.Since(start)
	require.EventuallyWithT(b, func(c *assert.CollectT) {
		var cached osbv1alpha1.SFServiceInstanceList
		require.NoError(c, s.API.Cache.List(ctx, &cached, ctrlclient.InNamespace(s.Namespace)))
		assert.Len(c, cached.Items, n)
	}, 5*time.Minute, 100*time.Millisecond, "the API's cache holds every instance")

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}}
	get := func(path string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
		if err != nil {
			return err
		}
		req.SetBasicAuth(testenv.OSBCredentials.Username, testenv.OSBCredentials.Password)
		req.Header.Set("X-Broker-API-Version", "2.17")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && (resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"state":"succeeded"`) && strings.Contains(path, "last_operation")) {
			err = fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return err
	}
	b.ResetTimer()
	catalogRate, catalogP99 := load(b, func() error { return get("/v2/catalog") })
	pollRate, pollP99 := load(b, func() error {
		return get("/v2/service_instances/" + ids[rand.IntN(n)] + "/last_operation?operation=provision")
	})
	b.StopTimer()

	b.ReportMetric(pollRate, "last_operation-req/s")
	b.ReportMetric(pollP99.Seconds()*1000, "last_operation-p99-ms")
	b.ReportMetric(pollRate/catalogRate, "last_operation/catalog")
	fmt.Printf("\nOSB polls with %d instances in the cache (written in %v), %d concurrent clients for %s on loopback:\n"+
		"  GET /v2/catalog        %8.0f req/s, p99 %v\n"+
		"  GET .../last_operation %8.0f req/s, p99 %v (%.2fx the catalog), a random instance each\n%s%s",
		n, written.Round(time.Second), loadClients, testenv.BenchWindow(loadDuration),
		catalogRate, catalogP99.Round(10*time.Microsecond), pollRate, pollP99.Round(10*time.Microsecond), pollRate/catalogRate,
		testenv.BenchVerdict("last_operation req/s over the catalog's", pollRate/catalogRate, 0.5, "x", false),
		testenv.BenchVerdict("last_operation p99", pollP99.Seconds()*1000, 20, "ms", true))
}

// provisioned writes an instance as a succeeded provision leaves it.
func provisioned(ctx context.Context, s *testenv.System, id, serviceID, planID string) error {
	spec := osbv1alpha1.SFServiceInstanceSpec{InstanceID: id, ServiceID: serviceID, PlanID: planID, OrganizationGUID: "org", SpaceGUID: "space",
		Context: &apiextensionsv1.JSON{Raw: []byte(`{"platform":"cloudfoundry","organization_guid":"org","space_guid":"space"}`)}}
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Name: api.ResourceName(id), Namespace: s.Namespace}, Spec: spec}
	if err := s.Kube.Client.Create(ctx, inst); err != nil {
		return fmt.Errorf("creating instance %s: %w", id, err)
	}
	now := metav1.Now()
	inst.Status = osbv1alpha1.SFServiceInstanceStatus{State: osbv1alpha1.StateSucceeded, Description: "provision succeeded",
		Resources:   []osbv1alpha1.Source{{APIVersion: "v1", Kind: "ConfigMap", Name: id + "-config", Namespace: s.Namespace}},
		AppliedSpec: &spec, ObservedGeneration: inst.Generation,
		Conditions: []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: inst.Generation,
			Reason: lifecycle.ReadyReason(lifecycle.OpProvision, osbv1alpha1.StateSucceeded), Message: "provision succeeded", LastTransitionTime: now}}}
	if err := s.Kube.Client.Status().Update(ctx, inst); err != nil {
		return fmt.Errorf("writing the status of instance %s: %w", id, err)
	}
	return nil
}
