package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestOSBInstanceMetadata: the metadata a plan's status template reports
// for a provision or an update (labels and attributes) is in the response
// and in GET of the instance.
func TestOSBInstanceMetadata(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("labelled", "", `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-db}
  - action: status
    type: gotemplate
    content: |
      {{- $size := dig "size" "small" (.instance.spec.parameters | default dict) }}
      provision: &ready
        state: succeeded
        metadata:
          labels: {size: {{ $size | quote }}, team: storage}
          attributes: {endpoint: "db.{{ .instance.metadata.namespace }}.svc:5432"}
      update: *ready
`)
	inst := "/v2/service_instances/md-1"
	md := func(size string) string {
		return fmt.Sprintf(`"metadata": {"labels": {"size": %q, "team": "storage"}, "attributes": {"endpoint": "db.%s.svc:5432"}}`, size, s.Namespace)
	}
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusCreated, `{`+md("small")+`}`)
	s.Expect(http.MethodGet, inst, "", http.StatusOK,
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, %s}`, s.ServiceID, plan, md("small")))
	s.Expect(http.MethodPatch, inst, fmt.Sprintf(`{"service_id": %q, "parameters": {"size": "large"}}`, s.ServiceID),
		http.StatusOK, `{`+md("large")+`}`)
	s.Expect(http.MethodGet, inst, "", http.StatusOK,
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "parameters": {"size": "large"}, %s}`, s.ServiceID, plan, md("large")))
}
