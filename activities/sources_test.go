package activities_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// threeSources reads three ConfigMaps and reports their values.
const threeSources = `
  - action: sources
    type: gotemplate
    content: |
      a: {apiVersion: v1, kind: ConfigMap, name: {{ .instance.metadata.name }}-a}
      b: {apiVersion: v1, kind: ConfigMap, name: {{ .instance.metadata.name }}-b}
      c: {apiVersion: v1, kind: ConfigMap, name: {{ .instance.metadata.name }}-c}
  - action: status
    type: gotemplate
    content: |
      provision:
        state: {{ if and .a .b .c }}succeeded{{ else }}in progress{{ end }}
        description: {{ printf "%v %v %v" (.a.data.v | default "-") (.b.data.v | default "-") (.c.data.v | default "-") | quote }}
`

// TestObserveReadsItsSourcesAtOnce: the status's sources are read at once,
// each read a round trip of its own beside the others (under load, most
// of a poll's time), and what each read is what the template sees. A read
// that fails fails the observation, naming the first failing source in the
// sources' order.
func TestObserveReadsItsSourcesAtOnce(t *testing.T) {
	h := newHarness(t)
	planID := h.plan("three", threeSources)
	inst := h.sys.Instance("src-1", planID, "")
	for i, name := range []string{"a", "b", "c"} {
		h.sys.Create(fmt.Sprintf("{apiVersion: v1, kind: ConfigMap, metadata: {name: src-1-%s, namespace: %s}, data: {v: %q}}", name, h.sys.Namespace, fmt.Sprint(i+1)))
	}

	// Each source read waits until all three are in flight, or 5 s: read
	// one after the other, the observation takes 15 s and the peak is 1.
	var mu sync.Mutex
	inFlight, peak := 0, 0
	all := make(chan struct{})
	var refuse map[string]bool
	direct, err := ctrlclient.NewWithWatch(h.sys.Kube.Config, ctrlclient.Options{Scheme: h.ops.Client.Scheme()})
	require.NoError(t, err)
	watched := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c ctrlclient.WithWatch, key ctrlclient.ObjectKey, obj ctrlclient.Object, opts ...ctrlclient.GetOption) error {
			if !strings.HasPrefix(key.Name, "src-1-") {
				return c.Get(ctx, key, obj, opts...)
			}
			mu.Lock()
			inFlight++
			peak = max(peak, inFlight)
			if inFlight == 3 {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(5 * time.Second):
			}
			mu.Lock()
			inFlight--
			mu.Unlock()
			if refuse[key.Name] {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, key.Name, fmt.Errorf("not for this test"))
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	ops := h.worker()
	ops.Client = watched
	observe := func() (activities.Outcome, error) {
		val, err := h.runOn(ops, "Observe", lifecycle.InstanceTarget(inst), lifecycle.OpProvision)
		if err != nil {
			return activities.Outcome{}, err
		}
		var o activities.Outcome
		require.NoError(t, val.Get(&o))
		return o, nil
	}

	began := time.Now()
	o, err := observe()
	require.NoError(t, err)
	assert.Equal(t, "succeeded", string(o.State))
	assert.Equal(t, "1 2 3", o.Description, "each source's object, as read, in the template")
	assert.Equal(t, 3, peak, "the three sources were read at once")
	assert.Less(t, time.Since(began), 5*time.Second, "no read waited for another")

	// Two reads refused: the error names b, the first of them in order,
	// whichever failed first.
	all, peak = make(chan struct{}), 0
	refuse = map[string]bool{"src-1-b": true, "src-1-c": true}
	_, err = observe()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `reading source "b"`)
	assert.NotContains(t, err.Error(), `reading source "c"`)
}

// appliedSources applies two ConfigMaps and reads them, and a third that
// the plan does not apply, as its sources.
const appliedSources = `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-a}
      data: {v: "1"}
      ---
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-b}
      data: {v: "2"}
` + threeSources

// TestTheObservationAfterAnApplyReadsOnlyWhatItDidNotWrite: the
// observation that follows an apply in the same run takes the objects the
// apply just wrote as the API server answered the writes, and reads only
// the sources it did not write; the next poll reads them all, and sees
// what changed since.
func TestTheObservationAfterAnApplyReadsOnlyWhatItDidNotWrite(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	inst := h.sys.Instance("written-1", h.plan("applied", appliedSources), "")
	h.sys.Create("{apiVersion: v1, kind: ConfigMap, metadata: {name: written-1-c, namespace: " + h.sys.Namespace + "}, data: {v: \"3\"}}")
	direct, err := ctrlclient.NewWithWatch(h.sys.Kube.Config, ctrlclient.Options{Scheme: h.ops.Client.Scheme()})
	require.NoError(t, err)
	var mu sync.Mutex
	reads := map[string]int{}
	counted := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c ctrlclient.WithWatch, key ctrlclient.ObjectKey, obj ctrlclient.Object, opts ...ctrlclient.GetOption) error {
			mu.Lock()
			reads[key.Name]++
			mu.Unlock()
			return c.Get(ctx, key, obj, opts...)
		},
	})
	ops := h.worker()
	ops.Client = counted
	target := lifecycle.InstanceTarget(inst)
	observe := func() activities.Outcome {
		val, err := h.runOn(ops, "Observe", target, lifecycle.OpProvision)
		require.NoError(t, err)
		var o activities.Outcome
		require.NoError(t, val.Get(&o))
		return o
	}

	_, err = h.runOn(ops, "ApplyTemplates", target, lifecycle.OpProvision)
	require.NoError(t, err)
	mu.Lock()
	reads = map[string]int{}
	mu.Unlock()
	o := observe()
	assert.Equal(t, "1 2 3", o.Description, "the written objects as the apply left them, and the one read")
	assert.Equal(t, map[string]int{"written-1-c": 1}, sourceReads(&mu, reads), "only the source the apply did not write is read")

	var cm corev1.ConfigMap
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "written-1-a"}, &cm))
	cm.Data["v"] = "changed"
	require.NoError(t, h.sys.Kube.Client.Update(ctx, &cm))
	mu.Lock()
	reads = map[string]int{}
	mu.Unlock()
	o = observe()
	assert.Equal(t, "changed 2 3", o.Description, "a later poll reads what changed since")
	assert.Equal(t, map[string]int{"written-1-a": 1, "written-1-b": 1, "written-1-c": 1}, sourceReads(&mu, reads))
}

// sourceReads are the reads of the written-1 sources counted in reads.
func sourceReads(mu *sync.Mutex, reads map[string]int) map[string]int {
	mu.Lock()
	defer mu.Unlock()
	out := map[string]int{}
	for name, n := range reads {
		if strings.HasPrefix(name, "written-1-") {
			out[name] = n
		}
	}
	return out
}
