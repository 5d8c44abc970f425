package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/quartermaster/qm/internal/codec"
	"github.com/quartermaster/qm/internal/testenv"
)

// tellingTemplates put the request's owner parameter into what the runs
// carry: the provision's outcome, and the message of an update that fails.
const tellingTemplates = `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-db}
      data: {}
  - action: status
    type: gotemplate
    content: |
      {{- $owner := .instance.spec.parameters.owner }}
      provision: {state: succeeded, description: "ready for {{ $owner }}"}
      update: {state: failed, description: "cannot serve {{ $owner }} any more"}
      bind:
        state: succeeded
        response: {credentials: {user: "{{ $owner }}"}}
`

// TestEncryptedHistories: with the payload codec on, the OSB lifecycle
// runs as without it; a history read without the key holds neither the
// request's parameter nor the outcome or failure message that carries it;
// and the codec server gives them back to whoever holds its token.
func TestEncryptedHistories(t *testing.T) {
	c, err := codec.New(map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)}, "k1")
	require.NoError(t, err)
	plain, ns := testenv.OwnTemporalNamespace(t)
	dc, fc := codec.Converters(c)
	encrypting, err := client.NewClientFromExisting(plain, client.Options{Namespace: ns, DataConverter: dc, FailureConverter: fc,
		Logger: log.NewStructuredLogger(slog.Default())})
	require.NoError(t, err)
	t.Cleanup(encrypting.Close)
	s := testenv.Start(t, testenv.Parts{Temporal: encrypting, API: true, Worker: true, Watcher: true})
	plan := s.Plan("telling", "", tellingTemplates)
	const owner = "alice-7f3e9"
	inst := "/v2/service_instances/enc-1"
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space",
		"parameters": {"owner": %q}}`, s.ServiceID, plan, owner), http.StatusCreated, `{}`)
	s.Expect(http.MethodPut, inst+"/service_bindings/b-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusCreated, fmt.Sprintf(`{"credentials": {"user": %q}}`, owner))
	s.Expect(http.MethodPatch, inst, fmt.Sprintf(`{"service_id": %q, "parameters": {"owner": %q}}`, s.ServiceID, owner+"-2"),
		http.StatusInternalServerError, fmt.Sprintf(`{"description": "cannot serve %s-2 any more"}`, owner))
	s.Expect(http.MethodDelete, fmt.Sprintf("%s/service_bindings/b-1?service_id=%s&plan_id=%s", inst, s.ServiceID, plan), "", http.StatusOK, `{}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("%s?service_id=%s&plan_id=%s", inst, s.ServiceID, plan), "", http.StatusOK, `{}`)

	// Every run of the instance's and the binding's workflow IDs, as one
	// who can read Temporal but has no key reads them.
	ctx := context.Background()
	var histories strings.Builder
	var results []*commonpb.Payloads
	for _, id := range []string{"sfserviceinstance/" + s.Namespace + "/enc-1", "sfservicebinding/" + s.Namespace + "/b-1"} {
		list, err := plain.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, Query: fmt.Sprintf("WorkflowId = %q", id)})
		require.NoError(t, err)
		require.NotEmpty(t, list.Executions, id)
		for _, e := range list.Executions {
			it := plain.GetWorkflowHistory(ctx, id, e.Execution.RunId, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				event, err := it.Next()
				require.NoError(t, err)
				raw, err := protojson.Marshal(event)
				require.NoError(t, err)
				histories.Write(raw)
				if done := event.GetWorkflowExecutionCompletedEventAttributes(); done != nil && done.Result != nil {
					results = append(results, done.Result)
				}
			}
		}
	}
	h := histories.String()
	assert.NotContains(t, h, owner, "no parameter, outcome or failure message in clear")
	assert.NotContains(t, base64Of(h), owner)
	assert.Contains(t, h, base64.StdEncoding.EncodeToString([]byte(codec.Encoding)), "the payloads are encrypted")
	assert.Contains(t, h, "Encoded failure", "a failure's message is in its encrypted attributes")

	// The codec server, as the Temporal UI calls it.
	srv := httptest.NewServer(codec.Handler(c, "http://localhost:8233", "ui-token"))
	t.Cleanup(srv.Close)
	decode := func(token string, payloads *commonpb.Payloads) (int, string) {
		body, err := protojson.Marshal(payloads)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/decode", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(out)
	}
	require.NotEmpty(t, results)
	status, _ := decode("", results[0])
	assert.Equal(t, http.StatusUnauthorized, status, "no token, nothing decoded")
	status, _ = decode("wrong", results[0])
	assert.Equal(t, http.StatusUnauthorized, status)
	var decoded strings.Builder
	for _, r := range results {
		status, body := decode("ui-token", r)
		require.Equal(t, http.StatusOK, status, body)
		decoded.WriteString(base64Of(body))
	}
	assert.Contains(t, decoded.String(), "ready for "+owner, "the provision's outcome, decrypted")
}

// base64Of is s with every base64 string in it decoded beside it, so that
// a payload's data (JSON's bytes are base64) can be searched.
func base64Of(s string) string {
	var out strings.Builder
	for _, field := range strings.FieldsFunc(s, func(r rune) bool { return r == '"' }) {
		if raw, err := base64.StdEncoding.DecodeString(field); err == nil {
			out.Write(raw)
			out.WriteByte('\n')
		}
	}
	return out.String()
}
