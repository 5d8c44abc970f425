package plan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestHelm(t *testing.T) {
	archive := testenv.ChartArchive(t)
	vars := plan.Values{
		"plan":     map[string]any{"spec": map[string]any{"name": "small"}},
		"instance": map[string]any{"metadata": map[string]any{"name": "i-1"}},
	}

	ch, err := plan.LoadChart(archive)
	require.NoError(t, err)
	objs, err := plan.Helm(ch, plan.Release{Name: "i-1", Namespace: "tenant-a"}, map[string]any{"size": "large"}, vars, plan.Bounds{})
	require.NoError(t, err)
	require.Len(t, objs, 2, "NOTES.txt and partials are not objects; the upgrade-only object is absent")
	cm := objs[0]
	assert.Equal(t, "i-1-tenant", cm.GetName())
	assert.Equal(t, "tenant-a", cm.GetNamespace())
	assert.Equal(t, map[string]any{"size": "large", "plan": "small", "instance": "i-1"}, cm.Object["data"],
		"parameters override chart defaults; template variables are under .Values")
	assert.Equal(t, "ResourceQuota", objs[1].GetKind())
	assert.Equal(t, map[string]any{"pods": "4"}, objs[1].Object["spec"].(map[string]any)["hard"], "chart defaults stay")

	objs, err = plan.Helm(ch, plan.Release{Name: "i-1", Namespace: "tenant-a", Upgrade: true}, nil, vars, plan.Bounds{})
	require.NoError(t, err)
	assert.Len(t, objs, 3)
}
