package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// TestStandbyServesNoGaugesAndTakesOverOnSIGTERM: of two watcher
// processes, the leader serves the fleet's gauges and the standby none
// (docs/metrics.md), so that a query never adds a standby's stale count.
// The leader, sent SIGTERM as a rolling update does, gives its lease up on
// its way out: the standby leads within a retry period or two, not after
// the lease runs out, and serves the gauges from then on.
func TestStandbyServesNoGaugesAndTakesOverOnSIGTERM(t *testing.T) {
	// Longer than the other suites' 6 s, so that a handover (3.8 s in a
	// loaded make test) stands well apart from a lease left to run out
	// (at least 14 s).
	const standbyLease = 15 * time.Second
	e := newIsolatedProcessEnv(t)
	qm, kube, s := e.qm, e.kube, e.s
	ns := s.Namespace
	start(t, qm, "worker", nil, slices.Concat([]string{"worker", "--health-addr", "0", "--metrics-addr", "0"}, e.common)...)
	watcher := func(name string) (*process, string) {
		addr := testenv.FreeAddr(t)
		p := start(t, qm, name, nil, slices.Concat([]string{"watcher", "--leader-election-namespace", ns, "--health-addr", "0",
			"--metrics-addr", addr, "--leader-elect-lease-duration", standbyLease.String(), "--leader-elect-renew-deadline", "4s",
			"--leader-elect-retry-period", retryPeriod.String()}, e.common)...)
		return p, "http://" + addr + "/metrics"
	}
	lease := func() coordinationv1.LeaseSpec { return leaseSpec(kube, ns, starter.LeaseName) }
	holder := func() string { return ptr.Deref(lease().HolderIdentity, "") }

	leader, leaderMetrics := watcher("watcher-1")
	require.Eventually(t, func() bool { return holder() != "" }, 30*time.Second, 50*time.Millisecond, "the first watcher takes the lease")
	first := holder()
	_, standbyMetrics := watcher("watcher-2")
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance("counted", plan, "")
	s.WaitInstance("counted", "provisioned", testenv.Succeeded(1))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, testenv.Scrape(c, leaderMetrics).Has("qm_instances", "plan", plan, "state", "succeeded"))
	}, 30*time.Second, 100*time.Millisecond, "the leader counts the instance")
	standby := testenv.Scrape(t, standbyMetrics)
	for _, gauge := range []string{"qm_instances", "qm_bindings", "qm_plan_maximum_polling_seconds"} {
		assert.False(t, standby.Has(gauge), "the standby serves no %s", gauge)
	}
	assert.NotEmpty(t, standby, "the standby serves its own process's metrics")

	// SIGTERM: the lease is given up, not left to run out.
	termed := time.Now()
	leader.stop(t)
	require.Eventually(t, func() bool { h := holder(); return h != "" && h != first }, time.Minute, 20*time.Millisecond,
		"the standby takes the lease")
	takeover := lease().AcquireTime.Sub(termed)
	t.Logf("the standby leads %s after the leader's SIGTERM (lease duration %s, retry period %s)", takeover.Round(time.Millisecond), standbyLease, retryPeriod)
	// A lease left to run out would take at least standbyLease less one
	// retry period after the SIGTERM (its last renewal came before it).
	assert.Less(t, takeover, standbyLease/2, "the leader handed its lease over as it stopped")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, testenv.Scrape(c, standbyMetrics).Has("qm_instances", "plan", plan, "state", "succeeded"))
	}, 30*time.Second, 100*time.Millisecond, "the new leader counts the instance")
}
