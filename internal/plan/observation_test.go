package plan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/plan"
)

// TestDecide: what a status template's word means for each operation, and
// what it calls on the worker to write.
func TestDecide(t *testing.T) {
	metadata := &osbv1alpha1.InstanceMetadata{Labels: map[string]string{"tier": "gold"}}
	for _, tc := range []struct {
		name  string
		op    lifecycle.Operation
		st    plan.Status
		saved string
		want  plan.Observation
		err   string
	}{
		{name: "a provision under way shows its description", op: lifecycle.OpProvision,
			st:   plan.Status{State: "in progress", Description: "waiting for the database"},
			want: plan.Observation{State: osbv1alpha1.StateInProgress, Description: "waiting for the database", Progress: "waiting for the database"}},
		{name: "under way with nothing to say shows nothing", op: lifecycle.OpUpdate,
			st:   plan.Status{State: "in progress"},
			want: plan.Observation{State: osbv1alpha1.StateInProgress}},
		{name: "a provision that succeeded records its metadata and keeps the registry's dashboard", op: lifecycle.OpProvision,
			st: plan.Status{State: "succeeded", Metadata: metadata}, saved: "https://dash.example/db-1",
			want: plan.Observation{State: osbv1alpha1.StateSucceeded, Metadata: metadata, DashboardURL: "https://dash.example/db-1"}},
		{name: "the status's own dashboard wins", op: lifecycle.OpUpdate,
			st: plan.Status{State: "succeeded", DashboardURL: "https://new.example"}, saved: "https://old.example",
			want: plan.Observation{State: osbv1alpha1.StateSucceeded, DashboardURL: "https://new.example"}},
		{name: "metadata of a deprovision is not recorded", op: lifecycle.OpDeprovision,
			st:   plan.Status{State: "in progress", Metadata: metadata},
			want: plan.Observation{State: osbv1alpha1.StateInProgress}},
		{name: "a bind that succeeded stores its response", op: lifecycle.OpBind,
			st:   plan.Status{State: "succeeded", Response: map[string]any{"credentials": map[string]any{"user": "u"}}},
			want: plan.Observation{State: osbv1alpha1.StateSucceeded, Credentials: &plan.BindResponse{Credentials: map[string]any{"user": "u"}}}},
		{name: "a bind under way stores nothing yet", op: lifecycle.OpBind,
			st:   plan.Status{State: "in progress", Response: map[string]any{"credentials": "not yet"}},
			want: plan.Observation{State: osbv1alpha1.StateInProgress}},
		{name: "a failed update says whether it may be repeated", op: lifecycle.OpUpdate,
			st:   plan.Status{State: "failed", Description: "no room", Error: "quota", UpdateRepeatable: new(true)},
			want: plan.Observation{State: osbv1alpha1.StateFailed, Description: "no room", Error: "quota", UpdateRepeatable: new(true)}},
		{name: "a bind response of the wrong shape is a template error", op: lifecycle.OpBind,
			st:  plan.Status{State: "succeeded", Response: map[string]any{"endpoints": []any{map[string]any{"host": "h"}}}},
			err: "endpoints[0] needs a host and ports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.st.Decide(tc.op, tc.saved)
			if tc.err != "" {
				var te *plan.TemplateError
				require.ErrorAs(t, err, &te)
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
