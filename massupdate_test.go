package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestMassUpdateCommand runs `qm mass-update` as an operator would: a dry
// run, a start that waits (one line per change on a pipe, a non-zero exit
// when updates failed), status and list.
func TestMassUpdateCommand(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true, API: true})
	planID := s.Plan("mass", "  context: {version: \"1\"}\n", testenv.Templates("mass"))
	for i := range 6 {
		params := ""
		if i == 5 {
			params = `{"fragile": true}`
		}
		s.Instance(fmt.Sprintf("cli-%d", i), planID, params)
		s.WaitInstance(fmt.Sprintf("cli-%d", i), "provisioned", testenv.Succeeded(1))
	}
	var plan osbv1alpha1.SFPlan
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "mass"}, &plan))
	base := plan.DeepCopy()
	plan.Spec.Context.Raw = []byte(`{"version":"2"}`)
	require.NoError(t, s.Kube.Client.Patch(context.Background(), &plan, ctrlclient.MergeFrom(base)))
	s.WaitPlanGeneration(planID, plan.Generation)

	t.Setenv("QM_ADMIN_USERNAME", testenv.AdminCredentials.Username)
	t.Setenv("QM_ADMIN_PASSWORD", testenv.AdminCredentials.Password)
	qm := func(args ...string) (string, error) {
		cmd := newRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"mass-update", "--url", s.URL}, args...))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}

	out, err := qm("start", "--plan", planID, "--dry-run")
	require.NoError(t, err, out)
	assert.Contains(t, out, s.Namespace+"/cli-0\n")
	assert.Contains(t, out, "would update 6 of 6 instances (0 current already); nothing was changed")

	name := s.Namespace + "/cli"
	out, err = qm("start", "--name", name, "--plan", planID, "--concurrency", "2", "--wait")
	require.EqualError(t, err, "1 updates failed", out)
	assert.Contains(t, out, "started mass update "+name)
	assert.Contains(t, out, "completed: 6/6 (5 succeeded, 1 failed, 0 skipped), 0 in flight")
	assert.Contains(t, out, "failed "+s.Namespace+"/cli-5: ")
	assert.Contains(t, out, "version 2 cannot run a fragile instance")
	assert.NotContains(t, out, "\r", "a pipe gets lines, not a bar")

	out, err = qm("status", name)
	require.Error(t, err)
	assert.Contains(t, out, name+" (completed): completed: 6/6")

	out, err = qm("list")
	require.NoError(t, err, out)
	assert.Regexp(t, name+` +completed`, out)

	out, err = qm("pause", name)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "409 Conflict: mass update "+name+" is completed")

	cmd := newRootCommand()
	cmd.SetArgs([]string{"mass-update", "--url", s.URL, "--password", "wrong", "list"})
	cmd.SetOut(&bytes.Buffer{})
	err = cmd.ExecuteContext(context.Background())
	assert.ErrorContains(t, err, "the admin API refused the credentials")
}
