package versioning

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPromote(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Startup
		want bool
	}{
		{"the first start of a deployment", Startup{}, true},
		{"the first start, with a revision", Startup{Revision: 1}, true},
		{"already current", Startup{Revision: 5, Recorded: []int{1}, EverRouted: true, Current: true}, false},
		{"an upgrade: a newer revision", Startup{Revision: 2, Recorded: []int{1}, EverRouted: true}, true},
		{"a rollback is a newer revision too", Startup{Revision: 3, Recorded: []int{1, 2}, EverRouted: true}, true},
		{"an older revision's pod restarting", Startup{Revision: 1, Recorded: []int{1, 2}, EverRouted: true}, false},
		{"the same revision's second pod", Startup{Revision: 2, Recorded: []int{1, 2}, EverRouted: true}, false},
		{"promoted by hand (no revision)", Startup{EverRouted: true}, false},
		{"routed by hand, nothing recorded, a revision", Startup{Revision: 1, EverRouted: true}, true},
		{"a new install over a gone one's higher revisions", Startup{Revision: 1, Recorded: []int{7}, EverRouted: true, CurrentGone: true}, true},
		{"by hand, the current build gone", Startup{EverRouted: true, CurrentGone: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Promote(tc.s))
		})
	}
}

func TestLeave(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Routing
		want bool
	}{
		{"current, runs pinned: the others serve them", Routing{Current: true, Pinned: 3}, true},
		{"ramping", Routing{Ramping: true, Pinned: 3}, true},
		{"replaced, runs pinned", Routing{Pinned: 1}, false},
		{"replaced, none pinned at one look", Routing{}, false},
		{"replaced, none pinned for less than Settle", Routing{EmptyFor: Settle - time.Second}, false},
		{"replaced, drained", Routing{EmptyFor: Settle}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Leave(tc.r))
		})
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		deployment, build string
		ok                bool
	}{
		{"quartermaster", "1.4.0", true},
		{"qm-prod", "sha-3f2a9c1+dirty", true},
		{"qm.prod", "1", false},
		{"qm:prod", "1", false},
		{"qm", "", false},
		{"qm", `1" OR "1`, false},
		{"", "1", false},
	} {
		err := Check(tc.deployment, tc.build)
		assert.Equal(t, tc.ok, err == nil, "%s %s: %v", tc.deployment, tc.build, err)
	}
}

func TestPinnedQuery(t *testing.T) {
	assert.Equal(t, `TemporalWorkerDeploymentVersion = "qm:1.4.0" AND TemporalWorkflowVersioningBehavior = "Pinned" AND ExecutionStatus = "Running"`,
		PinnedQuery("qm", "1.4.0"))
}
