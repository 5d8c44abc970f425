package chart_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/cli"
	"github.com/quartermaster/qm/internal/crdupgrade"
	"github.com/quartermaster/qm/internal/testenv"
)

// releaseBeforeRotation is a commit whose CRDs lack the fields that
// binding rotation and Primaza's claims added: SFPlan's
// spec.bindingRotatable, SFServiceBinding's spec.predecessorBinding and
// ServiceClaim's spec.target. Its parent commit added them (6dd6977,
// 6f5cf81).
const releaseBeforeRotation = "b4c1ca5"

// crdsAt are the CustomResourceDefinitions as the release at ref shipped them.
func crdsAt(t *testing.T, ref string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	defs, err := crds.Definitions()
	require.NoError(t, err)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, def := range defs {
		file := "crds/bases/" + def.Spec.Group + "_" + def.Spec.Names.Plural + ".yaml"
		if !testenv.ExistsAtCommit(t, ref, file) {
			continue // a kind that release did not have
		}
		old := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, yaml.Unmarshal(testenv.AtCommit(t, ref, file), old), file)
		out = append(out, old)
	}
	return out
}

// TestCRDsFollowTheRelease: on a cluster that the release before binding
// rotation left (its definitions installed, objects written under them),
// the new fields are pruned from what is written, as Helm's crds/ alone
// would leave it. The chart's hook, `qm crds apply` under the hook's own
// service account and role, applies this release's definitions: an object
// written after keeps every field the release added (read back from the
// API server), and the one written before is still served. A rollback's
// older definitions are then refused, and the new fields survive an
// update made under them.
func TestCRDsFollowTheRelease(t *testing.T) {
	sister := testenv.StartSister(t, 0)
	ctx := context.Background()

	for _, old := range crdsAt(t, releaseBeforeRotation) {
		installed := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, sister.Client.Get(ctx, ctrlclient.ObjectKey{Name: old.Name}, installed))
		installed.Spec = old.Spec
		require.NoError(t, sister.Client.Update(ctx, installed), "installing the earlier release's %s", old.Name)
	}
	plan := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFPlan",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec":     map[string]any{"id": name, "name": name, "serviceId": "s", "description": "d", "bindingRotatable": true}}}
	}
	claim := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "primaza.io/v1alpha1", "kind": "ServiceClaim",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec": map[string]any{"serviceClassIdentity": []any{map[string]any{"name": "type", "value": "psqlserver"}},
				"serviceEndpointDefinitionKeys": []any{"host"}, "target": map[string]any{"environmentTag": "dev"}}}}
	}
	// Before: what the earlier definitions leave of the new fields.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p := plan("before")
		_ = sister.Client.Delete(ctx, p)
		require.NoError(c, sister.Client.Create(ctx, p))
		assert.NotContains(c, p.Object["spec"], "bindingRotatable", "the earlier definition prunes the field")
	}, 30*time.Second, 100*time.Millisecond, "the earlier release's SFPlan definition is served")

	out := crdsApply(t, sister, "default")
	defs, err := crds.Definitions()
	require.NoError(t, err)
	for _, def := range defs {
		assert.Contains(t, out, "applied "+def.Name+": ", "the hook applies %s", def.Name)
	}

	// After: what is written keeps the new fields, read back.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, obj := range []*unstructured.Unstructured{plan("after"), claim("after")} {
			_ = sister.Client.Delete(ctx, obj)
			require.NoError(c, sister.Client.Create(ctx, obj))
			got := obj.DeepCopy()
			require.NoError(c, sister.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), got))
			assert.Contains(c, got.Object["spec"], map[string]string{"SFPlan": "bindingRotatable", "ServiceClaim": "target"}[obj.GetKind()])
		}
	}, 30*time.Second, 100*time.Millisecond, "objects keep the fields this release added")
	before := plan("before")
	require.NoError(t, sister.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(before), before), "the object written before is still served")
	assert.Equal(t, "before", before.Object["spec"].(map[string]any)["name"])

	// A rollback to a release whose definitions lack those fields keeps the
	// installed ones, and an update made then keeps what they hold.
	results, err := crdupgrade.Apply(ctx, sister.Client, crdsAt(t, releaseBeforeRotation))
	require.NoError(t, err)
	for _, r := range results {
		if slices.Contains([]string{"sfplans.osb.servicefabrik.io", "serviceclaims.primaza.io", "sfservicebindings.osb.servicefabrik.io"}, r.Name) {
			assert.False(t, r.Apply, "an older release keeps the installed %s", r.Name)
			assert.Contains(t, r.Reason, "a newer release installed it")
		}
	}
	after := plan("after")
	require.NoError(t, sister.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(after), after))
	after.SetLabels(map[string]string{"touched": "by-the-older-release"})
	require.NoError(t, sister.Client.Update(ctx, after))
	require.NoError(t, sister.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(after), after))
	assert.Equal(t, true, after.Object["spec"].(map[string]any)["bindingRotatable"], "the field survives the rollback")
}

// crdsApply creates the chart's hook objects but its Job on the cluster,
// and runs what the Job runs, `qm crds apply`, with a token of the hook's
// service account; it returns the command's output.
func crdsApply(t *testing.T, kube *testenv.Sister, ns string) string {
	t.Helper()
	ctx := context.Background()
	hooks := testenv.RenderChartHooks(t, load(t), ns, values(t, ""))
	job := hooks["Job/qm-quartermaster-crds"]
	require.NotNil(t, job, "the chart's hook Job")
	assert.Equal(t, []any{"crds", "apply", "--log-level=info"}, dig(podSpec(t, job), "containers").([]any)[0].(map[string]any)["args"])
	for key, obj := range hooks {
		if obj.GetKind() == "Job" {
			continue
		}
		require.True(t, rbacKinds[obj.GetKind()], "a hook that is not the Job grants access: %s", key)
		require.NoError(t, kube.Client.Create(ctx, obj), "creating %s", key)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: kube.Config.Host, CertificateAuthorityData: kube.Config.CAData}
	cfg.AuthInfos["crds"] = &clientcmdapi.AuthInfo{Token: kube.ServiceAccountToken(t, ns, "qm-quartermaster-crds")}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "crds"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))

	root := cli.NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"crds", "apply", "--kubeconfig", path})
	require.NoError(t, root.ExecuteContext(ctx), "qm crds apply as the hook's service account:\n%s", out.String())
	t.Logf("qm crds apply:\n%s", out.String())
	return out.String()
}
