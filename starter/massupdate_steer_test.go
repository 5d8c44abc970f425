package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/testenv"
)

// admin calls the admin API and decodes its JSON reply into out.
//
// It reports on t, which is the test or an Eventually condition's
// *assert.CollectT, as are runProgress's and openGates's.
func admin(t require.TestingT, s *testenv.System, method, path, body string, wantStatus int, out any) {
	status, got, _ := testenv.HTTP(method, s.AdminURL+path, body, &testenv.AdminCredentials, nil)
	require.Equal(t, wantStatus, status, got)
	if out != nil {
		require.NoError(t, json.Unmarshal([]byte(got), out), got)
	}
}

// runProgress asks the admin API for a run's progress.
func runProgress(t require.TestingT, s *testenv.System, name string) massupdate.Progress {
	var run struct {
		Status   string              `json:"status"`
		Progress massupdate.Progress `json:"progress"`
	}
	admin(t, s, http.MethodGet, "/admin/mass-updates/"+name, "", http.StatusOK, &run)
	return run.Progress
}

// fleet reads the instances, by name.
func fleet(c require.TestingT, s *testenv.System) map[string]osbv1alpha1.SFServiceInstance {
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(c, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)))
	out := map[string]osbv1alpha1.SFServiceInstance{}
	for _, inst := range list.Items {
		out[inst.Name] = inst
	}
	return out
}

// openGates lets the gated updates in progress finish, and returns how many
// were in progress and how many instances are rendered from generation 2.
func openGates(t require.TestingT, s *testenv.System) (inProgress, updated int) {
	for _, inst := range fleet(t, s) {
		switch {
		case inst.Status.State == osbv1alpha1.StateInProgress:
			inProgress++
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: inst.Name + "-update-gate", Namespace: s.Namespace}}
			if err := s.Kube.Client.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
				require.NoError(t, err)
			}
		case inst.Status.AppliedPlanGeneration == 2:
			updated++
		}
	}
	return inProgress, updated
}

// TestMassUpdateSteering runs a mass update of 60 instances whose updates
// wait for a gate, at concurrency 5, through the admin API: sampled
// throughout, no more than 5 are ever in progress; a pause starts no new
// update; a resume finishes the rest. Twelve rounds of 5 show the bound as
// well as the forty that 200 instances took (four minutes of make test).
func TestMassUpdateSteering(t *testing.T) {
	const n = 60
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true})
	planID := massFleet(t, s, n, "", func(int) string { return `{"gated": true}` })
	newVersion(t, s, "2")

	var dry struct {
		Total     int      `json:"total"`
		Instances []string `json:"instances"`
	}
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"plans": [%q], "dryRun": true}`, planID), http.StatusOK, &dry)
	assert.Equal(t, n, dry.Total)
	assert.Len(t, dry.Instances, n)
	assert.Empty(t, runningUpdates(t, s), "a dry run changes nothing")

	name := s.Namespace + "/gated"
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q], "concurrency": 5}`, name, planID), http.StatusAccepted, nil)
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q]}`, name, planID), http.StatusConflict, nil)
	most := 0
	sample := func(until int) {
		deadline := time.Now().Add(3 * time.Minute)
		for updated := 0; updated < until; {
			require.True(t, time.Now().Before(deadline), "%d of %d updated", updated, until)
			var inProgress int
			inProgress, updated = openGates(t, s)
			require.LessOrEqual(t, inProgress, 5, "updates in progress at once")
			most = max(most, inProgress)
			time.Sleep(50 * time.Millisecond) // the sampling period, not a wait before an assertion
		}
	}
	sample(n / 2)
	admin(t, s, http.MethodPost, "/admin/mass-updates/"+name+"/pause", "", http.StatusAccepted, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p := runProgress(c, s, name)
		assert.Equal(c, massupdate.Paused, p.State)
		assert.Zero(c, p.InFlight, "the updates in flight end")
		openGates(c, s)
	}, 30*time.Second, 100*time.Millisecond, "the run pauses")
	_, paused := openGates(t, s)
	assert.Never(t, func() bool {
		var list osbv1alpha1.SFServiceInstanceList
		if s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)) != nil {
			return false
		}
		updated := 0
		for _, inst := range list.Items {
			if inst.Status.State == osbv1alpha1.StateInProgress {
				return true
			}
			if inst.Status.AppliedPlanGeneration == 2 {
				updated++
			}
		}
		return updated != paused
	}, 3*time.Second, 100*time.Millisecond, "a paused run starts no update")
	assert.Less(t, paused, n)

	admin(t, s, http.MethodPost, "/admin/mass-updates/"+name+"/resume", "", http.StatusAccepted, nil)
	sample(n)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p := runProgress(c, s, name)
		assert.Equal(c, massupdate.Completed, p.State)
		assert.Equal(c, n, p.Succeeded)
	}, 30*time.Second, 100*time.Millisecond, "the run completes")
	assert.Greater(t, most, 1, "updates ran side by side")
	admin(t, s, http.MethodPost, "/admin/mass-updates/"+name+"/pause", "", http.StatusConflict, nil)
	admin(t, s, http.MethodGet, "/admin/mass-updates/no-such-run", "", http.StatusNotFound, nil)
}

// runningUpdates lists the instances with an update in progress.
func runningUpdates(t require.TestingT, s *testenv.System) []string {
	var out []string
	for name, inst := range fleet(t, s) {
		if inst.Status.State == osbv1alpha1.StateInProgress {
			out = append(out, name)
		}
	}
	return out
}
