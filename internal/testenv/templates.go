package testenv

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster/qm/deploy/samples"
)

// SampleTemplates returns the `templates:` list of a sample's plan, for a
// test plan that renders like the sample with a context of its own.
func SampleTemplates(t testing.TB, sample string) string {
	t.Helper()
	objs, err := samples.Load(sample)
	require.NoError(t, err)
	for _, obj := range objs {
		if obj.GetKind() != "SFPlan" {
			continue
		}
		list, _, err := unstructured.NestedSlice(obj.Object, "spec", "templates")
		require.NoError(t, err)
		raw, err := yaml.Marshal(list)
		require.NoError(t, err)
		return "  " + strings.ReplaceAll(strings.TrimSuffix(string(raw), "\n"), "\n", "\n  ")
	}
	t.Fatalf("sample %s has no plan", sample)
	return ""
}
