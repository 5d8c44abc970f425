package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestUsageKindVerify runs `qm usagekind verify` as an administrator
// would: a correct kind passes; a service account without patch fails,
// naming the rule it lacks; a wrong labelsPath or containersPath fails,
// naming the path.
func TestUsageKindVerify(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kube.Kubeconfig, 0o600))
	create := func(manifest string) {
		t.Helper()
		obj := &unstructured.Unstructured{}
		require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&obj.Object))
		require.NoError(t, kube.Client.Create(context.Background(), obj))
		if obj.GetNamespace() == "" {
			t.Cleanup(func() { _ = kube.Client.Delete(context.Background(), obj) })
		}
	}
	kind := func(name, paths string) string {
		full := ns + "-" + name
		create(fmt.Sprintf("apiVersion: servicecatalog.kyma-project.io/v1alpha1\nkind: UsageKind\nmetadata: {name: %s}\nspec:\n  resource: {group: apps, kind: deployment, version: v1}\n%s", full, paths))
		return full
	}
	create(fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: example.com/web}]}`, ns))
	// A service account that may read Deployments, not patch them.
	create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": %q}}`, ns))
	create(fmt.Sprintf(`{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader", "namespace": %q},
		"rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]}]}`, ns))
	create(fmt.Sprintf(`{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader", "namespace": %q},
		"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
		"subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": %q}]}`, ns, ns))

	verify := func(args ...string) (string, error) {
		cmd := NewRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"usagekind", "verify", "--kubeconfig", kubeconfig, "--namespace", ns}, args...))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}

	good := kind("good", "  labelsPath: spec.template.metadata.labels")
	out, err := verify(good, "--workload", "web")
	require.NoError(t, err, out)
	assert.Contains(t, out, "ok   resolves         apps/v1, kind Deployment, resource deployments.apps")
	assert.Contains(t, out, "ok   RBAC patch       I may patch deployments.apps")
	assert.Contains(t, out, "ok   sample           Deployment "+ns+"/web")
	assert.Contains(t, out, "ok   containersPath   spec.template.spec.containers (1 containers)")
	assert.Contains(t, out, "ok   injection        the API server accepts an injection (server-side dry run)")
	assert.Contains(t, out, "all 9 checks passed")

	// Without a sample, the paths cannot be checked: said, not failed.
	out, err = verify(good, "--namespace", kube.Namespace(t))
	require.NoError(t, err, out)
	assert.Contains(t, out, "skip sample           no Deployment to check the paths against: pass --namespace and --workload")
	assert.Contains(t, out, "5 checks passed, 1 skipped")

	out, err = verify(good, "--service-account", ns+":reader")
	require.EqualError(t, err, "2 of 9 checks failed", out)
	assert.Contains(t, out, "ok   RBAC get         "+ns+":reader may get deployments.apps")
	assert.Contains(t, out, fmt.Sprintf(`FAIL RBAC patch       %s:reader may not patch deployments.apps: missing the rule {apiGroups: ["apps"], resources: ["deployments"], verbs: ["patch"]} in namespace %s`, ns, ns))
	assert.Contains(t, out, "FAIL injection        a server-side dry run of the injection was refused")
	assert.Contains(t, out, "forbidden")

	labels := kind("labels", "  labelsPath: spec.templat.metadata.labels")
	out, err = verify(labels)
	require.EqualError(t, err, "1 of 9 checks failed", out)
	assert.Contains(t, out, "FAIL labelsPath       labelsPath spec.templat.metadata.labels: spec.templat is not in Deployment web")
	assert.Contains(t, out, "skip injection        not tried: labelsPath is wrong")

	containers := kind("containers", "  labelsPath: spec.template.metadata.labels\n  containersPath: spec.template.spec.initContainers.containers")
	out, err = verify(containers)
	require.EqualError(t, err, "1 of 8 checks failed", out)
	assert.Contains(t, out, "FAIL containersPath   containersPath spec.template.spec.initContainers.containers: spec.template.spec.initContainers is not in Deployment web")

	_, err = verify("no-such-kind")
	assert.ErrorContains(t, err, `reading UsageKind no-such-kind: usagekinds.servicecatalog.kyma-project.io "no-such-kind" not found`)
}
