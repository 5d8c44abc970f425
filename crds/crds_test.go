package crds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestDefinitionsCoverEveryKind(t *testing.T) {
	defs, err := crds.Definitions()
	require.NoError(t, err)
	var kinds []string
	for _, d := range defs {
		kinds = append(kinds, d.Spec.Group+"/"+d.Spec.Names.Kind)
		clusterScoped := d.Spec.Names.Kind == "UsageKind" || d.Spec.Names.Kind == "ClusterWorkloadResourceMapping"
		assert.Equal(t, clusterScoped, d.Spec.Scope == "Cluster", "%s scope", d.Name)
		for _, v := range d.Spec.Versions {
			if d.Spec.Names.Kind == "ClusterWorkloadResourceMapping" {
				// Configuration, as servicebinding.io defines it: no status.
				assert.Nil(t, v.Subresources, "%s has no status", d.Name)
				continue
			}
			assert.NotNil(t, v.Subresources, "%s has a status subresource", d.Name)
			var cols []string
			for _, c := range v.AdditionalPrinterColumns {
				cols = append(cols, c.Name)
			}
			assert.Contains(t, cols, "Age", "%s printer columns", d.Name)
			status := v.Schema.OpenAPIV3Schema.Properties["status"].Properties
			assert.Contains(t, status, "observedGeneration", "%s status", d.Name)
			assert.Contains(t, status, "conditions", "%s status", d.Name)
		}
	}
	slices.Sort(kinds)
	assert.Equal(t, []string{
		"osb.servicefabrik.io/SFPlan",
		"osb.servicefabrik.io/SFService",
		"osb.servicefabrik.io/SFServiceBinding",
		"osb.servicefabrik.io/SFServiceInstance",
		"primaza.io/RegisteredService",
		"primaza.io/ServiceCatalog",
		"primaza.io/ServiceClaim",
		"primaza.io/ServiceClass",
		"resource.servicefabrik.io/SFCluster",
		"servicebinding.io/ClusterWorkloadResourceMapping",
		"servicebinding.io/ServiceBinding",
		"servicecatalog.kyma-project.io/ServiceBindingUsage",
		"servicecatalog.kyma-project.io/UsageKind",
	}, kinds)
}

// TestSeedExamplesAreAccepted applies every YAML example of the seeds and
// checks that the API server kept every field of it: a field the CRDs do not
// know would be pruned silently, and a user's manifest would lose it.
func TestSeedExamplesAreAccepted(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	err := kube.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "interoperator"}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}

	files, err := filepath.Glob("testdata/seeds/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, 11, "one fixture file per example group of the seeds")

	applied := 0
	for _, file := range files {
		for i, obj := range readObjects(t, file) {
			accepted := t.Run(filepath.Base(file)+"#"+obj.GetKind()+"/"+obj.GetName(), func(t *testing.T) {
				want := obj.DeepCopy()
				namespaced, err := kube.Client.IsObjectNamespaced(obj)
				require.NoError(t, err, "document %d of %s", i, file)
				if namespaced && obj.GetNamespace() == "" {
					obj.SetNamespace(ns)
				}
				err = kube.Client.Patch(ctx, obj, client.Apply, client.FieldOwner("seed-test"), client.ForceOwnership)
				require.NoError(t, err, "the API server rejected document %d of %s", i, file)

				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(obj.GroupVersionKind())
				require.NoError(t, kube.Client.Get(ctx, client.ObjectKeyFromObject(obj), got))
				for field, value := range want.Object {
					if field == "apiVersion" || field == "kind" || field == "metadata" || field == "status" {
						continue
					}
					assertKept(t, field, normalize(t, value), normalize(t, got.Object[field]))
				}
				assert.Equal(t, want.GetLabels(), got.GetLabels(), "labels")
				// The admission policies add Quartermaster's own finalizer.
				assert.Subset(t, got.GetFinalizers(), want.GetFinalizers(), "finalizers")
			})
			if accepted {
				applied++
			}
		}
	}
	assert.Equal(t, 19, applied, "documents the API server accepted and kept whole")

	// Defaults the seeds state are applied by the API server.
	var rs unstructured.Unstructured
	rs.SetAPIVersion("primaza.io/v1alpha1")
	rs.SetKind("RegisteredService")
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "service-1"}, &rs))
	minutes, _, _ := unstructured.NestedInt64(rs.Object, "spec", "health check", "container", "minutes")
	assert.EqualValues(t, 5, minutes, "health-check minutes default to 5")
}

// TestStatusIsASubresource checks that state is written through the status
// subresource only, and that it takes only the seed's operation states.
func TestStatusIsASubresource(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)

	obj := decode(t, `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceInstance
metadata: {name: status-test}
spec: {serviceId: s, planId: p}
status: {state: succeeded}`)
	obj.SetNamespace(ns)
	require.NoError(t, kube.Client.Create(ctx, obj))
	_, found, _ := unstructured.NestedString(obj.Object, "status", "state")
	assert.False(t, found, "status given on create is dropped")

	patch := []byte(`{"status":{"state":"in progress","description":"rendering"}}`)
	require.NoError(t, kube.Client.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)))
	state, _, _ := unstructured.NestedString(obj.Object, "status", "state")
	assert.Equal(t, "in progress", state)
	assert.EqualValues(t, 1, obj.GetGeneration(), "a status write does not bump the generation")

	bad := []byte(`{"status":{"state":"done"}}`)
	err := kube.Client.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", bad))
	require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
	assert.Contains(t, err.Error(), `status.state: Unsupported value: "done"`)
	assert.Contains(t, err.Error(), `"in_queue"`)
}

// TestKubectlShowsState checks what `kubectl get` prints, with the kubectl
// that `make tools` builds.
func TestKubectlShowsState(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)

	obj := decode(t, `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceInstance
metadata: {name: kubectl-test}
spec: {serviceId: svc-1, planId: plan-1}`)
	obj.SetNamespace(ns)
	require.NoError(t, kube.Client.Create(ctx, obj))
	patch := []byte(`{"status":{"state":"succeeded","observedGeneration":1,"conditions":[{"type":"Started","status":"False",
		"reason":"EngineUnreachable","message":"engine-unreachable","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	require.NoError(t, kube.Client.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)))
	// A change to the spec shows as pending at once: Generation runs ahead
	// of Observed until an operation has taken it up.
	patch = []byte(`{"spec":{"parameters":{"size":"large"}}}`)
	require.NoError(t, kube.Client.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)))

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kube.Kubeconfig, 0o600))
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(testenv.BinDir(), "kubectl"),
		"--kubeconfig", kubeconfig, "get", "sfserviceinstances", "-n", ns).CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, string(out))
	assert.Equal(t, []string{"NAME", "STATE", "GENERATION", "OBSERVED", "SERVICE", "PLAN", "WAITING", "AGE"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"kubectl-test", "succeeded", "2", "1", "svc-1", "plan-1", "engine-unreachable"}, strings.Fields(lines[1])[:7],
		"a run that cannot start says why (the Started condition)")
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, "decoding %s", path)
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

func decode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&obj.Object))
	return obj
}

// normalize makes YAML- and server-decoded values comparable: numbers become
// float64 either way.
func normalize(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

// assertKept fails for every value of want that got does not hold. A null in
// want needs nothing: the API server drops nulls.
func assertKept(t *testing.T, path string, want, got any) {
	t.Helper()
	switch w := want.(type) {
	case nil:
	case map[string]any:
		g, ok := got.(map[string]any)
		if !assert.True(t, ok, "%s: stored as %T, want an object", path, got) {
			return
		}
		for k, v := range w {
			assertKept(t, path+"."+k, v, g[k])
		}
	case []any:
		g, ok := got.([]any)
		if !assert.True(t, ok, "%s: stored as %T, want a list", path, got) || !assert.Len(t, g, len(w), path) {
			return
		}
		for i := range w {
			assertKept(t, path+"["+strconv.Itoa(i)+"]", w[i], g[i])
		}
	default:
		assert.Equal(t, want, got, "%s was not stored as given (pruned or changed)", path)
	}
}

func TestAdmissionPoliciesAddFinalizersOnCreate(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	ctx := context.Background()

	inst := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: "svc", PlanID: "plan"},
	}
	require.NoError(t, kube.Client.Create(ctx, inst))
	assert.Equal(t, []string{osbv1alpha1.InstanceFinalizer}, inst.Finalizers, "the create's answer already carries the finalizer")

	own := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "own-finalizer", Namespace: ns, Finalizers: []string{"example.com/keep"}},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: "svc", PlanID: "plan"},
	}
	require.NoError(t, kube.Client.Create(ctx, own))
	assert.ElementsMatch(t, []string{"example.com/keep", osbv1alpha1.InstanceFinalizer}, own.Finalizers, "a user's finalizer is kept")

	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "binding", Namespace: ns},
		Spec:       osbv1alpha1.SFServiceBindingSpec{ID: "binding", InstanceID: "plain", ServiceID: "svc", PlanID: "plan"},
	}
	require.NoError(t, kube.Client.Create(ctx, b))
	assert.Equal(t, []string{osbv1alpha1.BindingFinalizer}, b.Finalizers)

	claim := &primazav1alpha1.ServiceClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: ns}, Spec: primazav1alpha1.ServiceClaimSpec{
		ServiceClassIdentity: []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psql"}}, ServiceEndpointDefinitionKeys: []string{"host"}, EnvironmentTag: "dev"}}
	require.NoError(t, kube.Client.Create(ctx, claim))
	assert.Equal(t, []string{primazav1alpha1.ClaimFinalizer}, claim.Finalizers)

	// Only creates are mutated: the workflow that removes the finalizer
	// must see it gone, or deletion would never finish.
	patch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`))
	require.NoError(t, kube.Client.Patch(ctx, inst, patch))
	assert.Empty(t, inst.Finalizers)
	require.NoError(t, kube.Client.Delete(ctx, inst))
	err := kube.Client.Get(ctx, client.ObjectKeyFromObject(inst), inst)
	assert.True(t, apierrors.IsNotFound(err), "an instance without finalizer is gone at once: %v", err)
}

func TestAdmissionPoliciesAreValid(t *testing.T) {
	objs, err := crds.AdmissionPolicies()
	require.NoError(t, err)
	var names []string
	for _, o := range objs {
		names = append(names, o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName())
	}
	assert.ElementsMatch(t, []string{
		"MutatingAdmissionPolicy/quartermaster-instance-finalizer", "MutatingAdmissionPolicyBinding/quartermaster-instance-finalizer",
		"MutatingAdmissionPolicy/quartermaster-binding-finalizer", "MutatingAdmissionPolicyBinding/quartermaster-binding-finalizer",
		"MutatingAdmissionPolicy/quartermaster-claim-finalizer", "MutatingAdmissionPolicyBinding/quartermaster-claim-finalizer",
		"ValidatingAdmissionPolicy/quartermaster-deletion-protection", "ValidatingAdmissionPolicyBinding/quartermaster-deletion-protection",
	}, names)
}
