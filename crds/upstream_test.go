package crds_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/testenv"
)

// upstreamFixtures are the manifests of testdata/upstream, one file per
// kind, each written with every field of the upstream project's CRD.
var upstreamFixtures = []string{
	"sfservice.yaml", "sfplan.yaml", "sfserviceinstance.yaml", "sfservicebinding.yaml", "sfcluster.yaml",
	"servicecatalog.yaml", "serviceclaim.yaml", "serviceclass.yaml",
}

// TestUpstreamManifestsAreKeptWhole applies, for each kind the seed
// systems ship, a manifest with every field of the upstream CRD, spelled
// as upstream spells it (Service Fabrik's appGuid, redirectUri,
// instanceRetrievable, free-form manager, status.totalCapacity and
// specHash; Primaza's claimedByLabels and claimID), with strict field
// validation, as kubectl does: the API server refuses a field it does not
// know instead of dropping it. Then it reads every field back, the
// status's too, written through the status subresource.
func TestUpstreamManifestsAreKeptWhole(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	files, err := filepath.Glob("testdata/upstream/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, len(upstreamFixtures), "a fixture per kind: %v", upstreamFixtures)
	for _, name := range upstreamFixtures {
		for _, obj := range readObjects(t, filepath.Join("testdata/upstream", name)) {
			t.Run(name+"#"+obj.GetName(), func(t *testing.T) {
				want := obj.DeepCopy()
				namespaced, err := kube.Client.IsObjectNamespaced(obj)
				require.NoError(t, err)
				if namespaced {
					obj.SetNamespace(ns)
				}
				status, hasStatus := obj.Object["status"]
				delete(obj.Object, "status")
				require.NoError(t, kube.Client.Patch(ctx, obj, client.Apply, client.FieldOwner("upstream-test"), client.ForceOwnership,
					client.FieldValidation("Strict")), "the API server refused the upstream manifest")
				if hasStatus {
					withStatus := &unstructured.Unstructured{Object: map[string]any{
						"apiVersion": obj.GetAPIVersion(), "kind": obj.GetKind(), "status": status,
						"metadata": map[string]any{"name": obj.GetName(), "namespace": obj.GetNamespace()},
					}}
					require.NoError(t, kube.Client.Status().Patch(ctx, withStatus, client.Apply, client.FieldOwner("upstream-test"), client.ForceOwnership),
						"the API server refused the upstream status")
				}

				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(obj.GroupVersionKind())
				require.NoError(t, kube.Client.Get(ctx, client.ObjectKeyFromObject(obj), got))
				for field, value := range want.Object {
					if field == "apiVersion" || field == "kind" || field == "metadata" {
						continue
					}
					assertKept(t, field, normalize(t, value), normalize(t, got.Object[field]))
				}
			})
		}
	}
	assert.FileExists(t, "testdata/upstream/README.md")
}
