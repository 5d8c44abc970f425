package starter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/cli"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/serviceclass"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/internal/trace"
	"github.com/quartermaster/qm/workflows/runs"
)

// traceTemplates provision a ConfigMap, or fail with a message of two
// lines when the parameters say fail; binds succeed at once.
const traceTemplates = `  - action: provision
    type: gotemplate
    content: |
      {{- if dig "fail" false (.instance.spec.parameters | default dict) }}{{ fail "the update was told to fail:\nthe second line of its message" }}{{ end }}
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{ .instance.metadata.name }}-db
      data: {}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded, description: ready}
      bind:
        state: succeeded
        response: {credentials: {user: u}}
`

// TestTrace: qm trace of a provisioned instance with a binding, a claim
// that holds it and a failed update shows the tree, each resource's state,
// the object its template applied, and the update's run with its whole
// failure message; -o json carries the same.
func TestTrace(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("traced", "", traceTemplates)
	s.Instance("db", plan, "")
	s.WaitInstance("db", "provisioned", testenv.Succeeded(1))
	s.Bind("db-app", "db", plan)
	registered := serviceclass.Name("SFServiceInstance", "db")
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: %s, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: traced}]
  serviceEndpointDefinition: [{name: host, value: db.example}]`, registered, s.Namespace))
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: app-db, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: traced}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev`, s.Namespace))
	waitClaim(t, s, "app-db", primazav1alpha1.ClaimResolved, registered)

	var inst osbv1alpha1.SFServiceInstance
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "db"}, &inst))
	base := inst.DeepCopy()
	inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"fail": true}`)}
	require.NoError(t, s.Kube.Client.Patch(ctx, &inst, ctrlclient.MergeFrom(base)))
	failed := s.WaitInstance("db", "update failed", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateFailed && i.Status.ObservedGeneration == 2
	})
	// The run's last activity writes the status a moment before the run
	// closes with its failure, which is what a trace shows of it.
	s.ClosedRun(runs.WorkflowID(lifecycle.InstanceTarget(failed)), runs.WorkflowType(lifecycle.OpUpdate))

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, s.Kube.Kubeconfig, 0o600))
	qm := func(args ...string) string {
		var out bytes.Buffer
		cmd := cli.NewRootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(t.Output())
		cmd.SetArgs(append(append([]string{"trace"}, args...), "-n", s.Namespace, "--kubeconfig", kubeconfig, "--temporal-address", testenv.TemporalAddress(t)))
		require.NoError(t, cmd.ExecuteContext(ctx))
		return out.String()
	}

	var root trace.Node
	require.NoError(t, json.Unmarshal([]byte(qm("sfserviceinstance/db", "-o", "json")), &root))
	assert.Equal(t, "SFServiceInstance", root.Kind)
	assert.Equal(t, "failed", root.State)
	whole := "the update was told to fail:\nthe second line of its message"
	assert.Contains(t, root.Detail, whole)
	require.NotEmpty(t, root.Runs)
	assert.Equal(t, "Update", root.Runs[0].Type, "the latest run first")
	assert.Contains(t, root.Runs[0].Failure, whole, "the whole failure message")
	assert.Equal(t, "Provision", root.Runs[len(root.Runs)-1].Type)
	kinds := map[string]trace.Node{}
	for _, c := range root.Children {
		kinds[c.Kind] = c
	}
	assert.Equal(t, trace.Node{Kind: "ConfigMap", Namespace: s.Namespace, Name: "db-db", State: "present"}, kinds["ConfigMap"])
	binding := kinds["SFServiceBinding"]
	assert.Equal(t, "db-app", binding.Name)
	assert.Equal(t, "succeeded", binding.State)
	require.NotEmpty(t, binding.Runs)
	assert.Equal(t, "Bind", binding.Runs[0].Type)
	claim := kinds["ServiceClaim"]
	assert.Equal(t, "app-db", claim.Name)
	assert.Equal(t, "Resolved", claim.State)

	text := qm("sfsi/db")
	t.Logf("qm trace sfsi/db:\n%s", text)
	for _, want := range []string{
		fmt.Sprintf("SFServiceInstance %s/db  [failed]", s.Namespace),
		fmt.Sprintf("├─ ConfigMap %s/db-db  [present]", s.Namespace),
		fmt.Sprintf("├─ SFServiceBinding %s/db-app  [succeeded]", s.Namespace),
		fmt.Sprintf("└─ ServiceClaim %s/app-db  [Resolved]", s.Namespace),
		"      | the second line of its message",
	} {
		assert.Contains(t, text, want)
	}
}
