package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// fencedObjects is how many ConfigMaps the plan of TestAResumedWorkerWritesNothingStale
// renders: enough that an apply takes a while, so that a worker can be
// stopped in the middle of one.
const fencedObjects = 150

// fencedTemplates render fencedObjects ConfigMaps that carry the instance's
// parameter version.
var fencedTemplates = fmt.Sprintf(`  - action: provision
    type: gotemplate
    content: |
      {{- range $i := until %d }}
      ---
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ $.instance.metadata.name }}-{{ $i }}, labels: {fenced: {{ $.instance.metadata.name }}}}
      data: {version: {{ $.instance.spec.parameters.version | quote }}}
      {{- end }}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded, description: ready}
`, fencedObjects)

// TestAResumedWorkerWritesNothingStale stops a worker (SIGSTOP) in the
// middle of applying generation 2. Another worker takes the run over,
// and generation 3 is applied. Then the first worker continues, with
// generation 2 rendered and most of its objects still to write: it tries
// to write the next one, the fence refuses it (the worker says so), and
// the objects stay generation 3's. The pause is shorter than the step's
// 30 s timeout, so the apply goes on after it rather than dying with its
// context: what keeps the writes out is the fence.
func TestAResumedWorkerWritesNothingStale(t *testing.T) {
	e := newProcessEnv(t)
	qm, kube, s := e.qm, e.kube, e.s
	ctx := context.Background()
	common := slices.Concat(e.common, []string{"--health-addr", "0", "--metrics-addr", "0"})
	worker := func(name string) *process { return start(t, qm, name, nil, append([]string{"worker"}, common...)...) }
	start(t, qm, "watcher", nil, append([]string{"watcher", "--leader-elect=false"}, common...)...)
	first := worker("worker-1")
	planID := s.Plan("fenced", "", fencedTemplates)

	inst := &osbv1alpha1.SFServiceInstance{}
	inst.Name, inst.Namespace = "fenced", s.Namespace
	inst.Spec = osbv1alpha1.SFServiceInstanceSpec{InstanceID: "fenced", ServiceID: s.ServiceID, PlanID: planID,
		Parameters: &apiextensionsv1.JSON{Raw: []byte(`{"version": "g1"}`)}}
	require.NoError(t, kube.Client.Create(ctx, inst))
	s.WaitInstance("fenced", "provisioned", testenv.Succeeded(1))
	versions := func() (map[string]int, error) {
		var cms corev1.ConfigMapList
		err := kube.Client.List(ctx, &cms, ctrlclient.InNamespace(s.Namespace), ctrlclient.MatchingLabels{"fenced": "fenced"})
		count := map[string]int{}
		for _, cm := range cms.Items {
			count[cm.Data["version"]]++
		}
		return count, err
	}

	// Generation 2: the worker is stopped once its apply has begun.
	setVersion := func(v string) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec": {"parameters": {"version": %q}}}`, v)
		require.NoError(t, kube.Client.Patch(ctx, inst, ctrlclient.RawPatch("application/merge-patch+json", []byte(patch))))
	}
	setVersion("g2")
	require.Eventually(t, func() bool {
		count, err := versions()
		return err == nil && count["g2"] > 0
	}, time.Minute, time.Millisecond, "the worker applies generation 2")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	count, err := versions()
	require.NoError(t, err)
	require.Less(t, count["g2"], fencedObjects, "the worker was stopped in the middle of the apply (versions: %v)", count)
	t.Logf("worker-1 stopped with %v applied", count)

	// Another worker takes the run over, and generation 3 is applied.
	worker("worker-2")
	setVersion("g3")
	s.WaitInstance("fenced", "generation 3 applied", testenv.Succeeded(3))
	count, err = versions()
	require.NoError(t, err)
	require.Equal(t, map[string]int{"g3": fencedObjects}, count, "generation 3 is applied")

	// The stopped worker continues where it was, with generation 2.
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("worker-1 continues after a pause of %s", time.Since(stopped).Round(time.Millisecond))
	assert.Eventually(t, func() bool {
		for line := range strings.Lines(first.log.String()) {
			if strings.Contains(line, "the fence refused a stale apply") && strings.Contains(line, "name=fenced") &&
				strings.Contains(line, `rendered="2 (plan generation`) {
				return true
			}
		}
		return false
	}, 15*time.Second, 50*time.Millisecond, "worker-1 tries to write generation 2 and the fence refuses it")
	assert.Never(t, func() bool {
		count, err := versions()
		if err == nil && count["g3"] != fencedObjects {
			t.Logf("after SIGCONT: %v", count)
			return true
		}
		return false
	}, 15*time.Second, 50*time.Millisecond, "no object of generation 2 is written after generation 3")
}
