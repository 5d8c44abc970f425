package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// hashedNames are templates that name what they apply after a hash of the
// instance's or binding's name, as a plan must whose IDs may be long: a
// name of 253 characters leaves no room for a suffix.
const hashedNames = `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: db-{{ .instance.metadata.name | sha256sum | trunc 16 }}
      data: {id: {{ .instance.spec.instanceId | quote }}}
  - action: bind
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: login-{{ .binding.metadata.name | sha256sum | trunc 16 }}
      data: {id: {{ .binding.spec.id | quote }}}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded, description: ready}
      bind:
        state: succeeded
        response: {credentials: {binding: {{ .binding.spec.id | quote }}}}
`

// TestOSBIdentifiers: docs/osb.md's rule for IDs. An instance_id or
// binding_id of up to 253 printable characters runs the whole lifecycle,
// whatever label values its names make (a label value has at most 63);
// one longer, or with a control character or a space, is a 400 that says
// why; an ID percent-encoded in another way is the same ID, and one
// encoded twice is refused.
func TestOSBIdentifiers(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("ids", "", hashedNames)
	provision := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan)
	bind := fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan)
	removal := fmt.Sprintf("?service_id=%s&plan_id=%s", s.ServiceID, plan)
	dotted253 := strings.Repeat("d", 63) + "." + strings.Repeat("d", 63) + "." + strings.Repeat("d", 63) + "." + strings.Repeat("d", 61)
	require.Len(t, dotted253, 253)

	for _, tc := range []struct{ name, instance, binding string }{
		{"63 characters", strings.Repeat("a", 63), strings.Repeat("b", 63)},
		{"64 characters", strings.Repeat("c", 64), strings.Repeat("e", 64)},
		{"253 characters, a valid name", dotted253, "x" + dotted253[1:]},
		{"253 characters, not a name", strings.Repeat("Z", 253), strings.Repeat("_", 253)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := "/v2/service_instances/" + tc.instance
			binding := inst + "/service_bindings/" + tc.binding
			s.Expect(http.MethodPut, inst, provision, http.StatusCreated, `{}`)
			recorded, err := s.GetInstance(api.ResourceName(tc.instance))
			require.NoError(t, err)
			assert.Equal(t, tc.instance, recorded.Spec.InstanceID)
			s.Expect(http.MethodGet, inst, "", http.StatusOK, fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan))
			want := fmt.Sprintf(`{"credentials": {"binding": %q}}`, tc.binding)
			s.Expect(http.MethodPut, binding, bind, http.StatusCreated, want)
			s.Expect(http.MethodGet, binding, "", http.StatusOK, want)
			s.Expect(http.MethodDelete, binding+removal, "", http.StatusOK, `{}`)
			s.Expect(http.MethodDelete, inst+removal, "", http.StatusOK, `{}`)
			s.Expect(http.MethodGet, inst, "", http.StatusNotFound, "")
			var left corev1.ConfigMapList
			require.NoError(t, s.Kube.Client.List(context.Background(), &left, ctrlclient.InNamespace(s.Namespace)))
			for _, cm := range left.Items {
				assert.NotEqual(t, tc.instance, cm.Data["id"], "the deprovision removed %s", cm.Name)
			}
		})
	}

	for _, tc := range []struct{ name, path, want string }{
		{"254 characters", "/v2/service_instances/" + strings.Repeat("a", 254),
			`{"description": "instance_id has 254 characters; at most 253 are taken"}`},
		{"a binding_id of 254", "/v2/service_instances/i/service_bindings/" + strings.Repeat("b", 254),
			`{"description": "binding_id has 254 characters; at most 253 are taken"}`},
		{"a control character", "/v2/service_instances/ctl%0Aid",
			`{"description": "instance_id \"ctl\\nid\" has byte 0x0a at 3: IDs are printable ASCII without spaces"}`},
		{"a space", "/v2/service_instances/a%20b",
			`{"description": "instance_id \"a b\" has byte 0x20 at 1: IDs are printable ASCII without spaces"}`},
		{"non-ASCII", "/v2/service_instances/caf%C3%A9",
			`{"description": "instance_id \"café\" has byte 0xc3 at 3: IDs are printable ASCII without spaces"}`},
		{"encoded twice", "/v2/service_instances/twin-%2561",
			`{"description": "instance_id \"twin-%61\" is percent-encoded twice; encode it once"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.Expect(http.MethodPut, tc.path, provision, http.StatusBadRequest, tc.want)
		})
	}

	t.Run("percent-encoded twins are one instance", func(t *testing.T) {
		s.Expect(http.MethodPut, "/v2/service_instances/twin-%61", provision, http.StatusCreated, `{}`)
		s.Expect(http.MethodPut, "/v2/service_instances/twin-a", provision, http.StatusOK, `{}`)
		s.Expect(http.MethodGet, "/v2/service_instances/tw%69n-a", "", http.StatusOK, "")
		var all osbv1alpha1.SFServiceInstanceList
		require.NoError(t, s.Kube.Client.List(context.Background(), &all, ctrlclient.InNamespace(s.Namespace)))
		var twins []string
		for _, inst := range all.Items {
			if strings.HasPrefix(inst.Spec.InstanceID, "twin") {
				twins = append(twins, inst.Name+" "+inst.Spec.InstanceID)
			}
		}
		assert.Equal(t, []string{"twin-a twin-a"}, twins)
		s.Expect(http.MethodDelete, "/v2/service_instances/twin-a"+removal, "", http.StatusOK, `{}`)
		_, err := s.GetInstance("twin-a")
		assert.True(t, apierrors.IsNotFound(err), "%v", err)
	})

	t.Run("an identity header of 1 MB", func(t *testing.T) {
		status, body, _ := s.Do(http.MethodPut, "/v2/service_instances/big-identity", provision,
			map[string]string{"X-Broker-API-Originating-Identity": identity("cloudfoundry", strings.Repeat("x", 1<<20))})
		assert.Contains(t, []int{http.StatusBadRequest, http.StatusRequestHeaderFieldsTooLarge}, status, body)
		_, err := s.GetInstance("big-identity")
		assert.True(t, apierrors.IsNotFound(err), "nothing was recorded: %v", err)
	})
}
