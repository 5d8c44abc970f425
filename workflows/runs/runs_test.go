package runs_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

func TestWorkflowID(t *testing.T) {
	assert.Equal(t, "sfserviceinstance/tenants/db-1", runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "tenants", Name: "db-1"}))
	assert.Equal(t, "sfservicebinding/tenants/app-1", runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: "tenants", Name: "app-1"}))
}

func TestWorkflowType(t *testing.T) {
	for op, want := range map[lifecycle.Operation]string{
		lifecycle.OpProvision: "Provision", lifecycle.OpUpdate: "Update", lifecycle.OpDeprovision: "Deprovision",
		lifecycle.OpBind: "Bind", lifecycle.OpUnbind: "Unbind",
	} {
		assert.Equal(t, want, runs.WorkflowType(op))
	}
}
