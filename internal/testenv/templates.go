package testenv

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster/qm/deploy/samples"
	"github.com/quartermaster/qm/internal/system"
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

//go:embed testdata/templates/*.yaml
var templates embed.FS

// Templates returns the plan templates of testdata/templates/<name>.yaml,
// as the `templates:` list of an SFPlan's spec.
func Templates(name string) string {
	raw, err := templates.ReadFile("testdata/templates/" + name + ".yaml")
	if err != nil {
		panic(fmt.Sprintf("testenv: no templates %q: %v", name, err))
	}
	return string(raw)
}

// Plan registers an SFPlan of the System's service, named name with the ID
// <namespace>-<name>; extra is YAML added to its spec (a
// maximum_polling_duration of 120 s unless it sets one), templates its
// `templates:` list (see Templates). It returns once every running
// component sees the plan.
func (s *System) Plan(name, extra, templates string) string {
	s.t.Helper()
	id := s.Namespace + "-" + name
	if !strings.Contains(extra, "maximum_polling_duration:") {
		extra = "  maximum_polling_duration: 120\n" + extra
	}
	s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: %s, namespace: %s}
spec:
  name: %s
  id: %s
  description: a plan of the test
  serviceId: %s
%s
  templates:
%s`, name, s.Namespace, name, id, s.ServiceID, extra, templates))
	s.WaitPlanGeneration(id, 1)
	return id
}

// WaitPlanGeneration waits until every running component sees generation
// gen (or a later one) of the plan planID.
func (s *System) WaitPlanGeneration(planID string, gen int64) {
	s.t.Helper()
	for _, sys := range []*system.System{s.worker, s.rest} {
		if sys == nil || sys.Offerings == nil {
			continue
		}
		require.Eventually(s.t, func() bool {
			p, err := sys.Offerings.Plan(context.Background(), planID)
			return err == nil && p.Generation >= gen
		}, 10*time.Second, 20*time.Millisecond, "Quartermaster sees generation %d of plan %s", gen, planID)
	}
}

var installSample sync.Once

// installSample installs the samples of `qm dev` in the namespace
// "default", once per test binary.
func (s *System) installSample() {
	s.t.Helper()
	installSample.Do(func() {
		require.NoError(s.t, samples.Install(context.Background(), s.Kube.Client, "default", "test", samples.Catalog))
	})
}
