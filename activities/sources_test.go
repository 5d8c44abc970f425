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
