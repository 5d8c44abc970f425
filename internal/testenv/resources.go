package testenv

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Create creates the object a YAML or JSON manifest describes.
func (s *System) Create(manifest string) *unstructured.Unstructured {
	s.t.Helper()
	obj, err := s.TryCreate(manifest)
	require.NoError(s.t, err)
	return obj
}

// TryCreate is Create returning its error, for goroutines where the test
// cannot be stopped.
func (s *System) TryCreate(manifest string) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&obj.Object); err != nil {
		return nil, fmt.Errorf("decoding the manifest: %w", err)
	}
	if err := s.Kube.Client.Create(context.Background(), obj); err != nil {
		return nil, fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return obj, nil
}

// Decode reads a YAML or JSON manifest into an object.
func Decode(t testing.TB, manifest string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&obj.Object))
	return obj
}

// Instance creates an SFServiceInstance of the plan in the System's
// namespace, as kubectl would; parameters is JSON or empty.
func (s *System) Instance(name, planID, parameters string) *osbv1alpha1.SFServiceInstance {
	s.t.Helper()
	inst, err := s.CreateInstance(name, planID, parameters)
	require.NoError(s.t, err)
	return inst
}

// CreateInstance is Instance returning its error, for goroutines (such as
// Parallel's) where the test cannot be stopped.
func (s *System) CreateInstance(name, planID, parameters string) (*osbv1alpha1.SFServiceInstance, error) {
	inst := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: name, ServiceID: s.serviceOf(planID), PlanID: planID},
	}
	if parameters != "" {
		inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(parameters)}
	}
	if err := s.Kube.Client.Create(context.Background(), inst); err != nil {
		return nil, fmt.Errorf("creating instance %s: %w", name, err)
	}
	return inst, nil
}

// serviceOf is the service of a plan that Plan registered, or of the sample.
func (s *System) serviceOf(planID string) string {
	switch planID {
	case TenantPlan:
		return TenantService
	case KeyValuePlan:
		return KeyValueService
	}
	return s.ServiceID
}

// Bind creates an SFServiceBinding of the instance named instance, as
// kubectl would, waits until its bind succeeded, and returns it.
func (s *System) Bind(name, instance, planID string) *osbv1alpha1.SFServiceBinding {
	s.t.Helper()
	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec:       osbv1alpha1.SFServiceBindingSpec{ID: name, InstanceID: instance, ServiceID: s.serviceOf(planID), PlanID: planID},
	}
	ctx := context.Background()
	require.NoError(s.t, s.Kube.Client.Create(ctx, b))
	require.EventuallyWithT(s.t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b))
		assert.Equal(c, osbv1alpha1.StateSucceeded, b.Status.State)
	}, 60*time.Second, 50*time.Millisecond, "binding %s succeeds", name)
	return b
}

// WaitInstance waits until the instance satisfies cond, and returns it.
func (s *System) WaitInstance(name, what string, cond func(*osbv1alpha1.SFServiceInstance) bool) *osbv1alpha1.SFServiceInstance {
	s.t.Helper()
	// The condition runs on Eventually's goroutine, which may still be
	// running one when Eventually gives up: what it saw is shared under mu.
	var mu sync.Mutex
	var found *osbv1alpha1.SFServiceInstance
	var last string
	ok := assert.Eventually(s.t, func() bool {
		var inst osbv1alpha1.SFServiceInstance
		err := s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &inst)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("state %q, description %q, generation %d, observed %d", inst.Status.State, inst.Status.Description, inst.Generation, inst.Status.ObservedGeneration)
		if !cond(&inst) {
			return false
		}
		found = &inst
		return true
	}, 90*time.Second, 50*time.Millisecond, "instance %s: %s", name, what)
	mu.Lock()
	defer mu.Unlock()
	if !ok {
		s.t.Fatalf("instance %s never reached %s; last seen: %s", name, what, last)
	}
	return found
}

// Succeeded is the condition of an instance whose operation on generation
// gen succeeded.
func Succeeded(gen int64) func(*osbv1alpha1.SFServiceInstance) bool {
	return func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateSucceeded && i.Status.ObservedGeneration == gen
	}
}

// WaitGone waits until obj is deleted.
func (s *System) WaitGone(obj ctrlclient.Object) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		return apierrors.IsNotFound(s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKeyFromObject(obj), obj))
	}, 90*time.Second, 50*time.Millisecond, "%T %s is deleted", obj, obj.GetName())
}

// RegistryValue reads one key of a registry Secret in the System's
// namespace, decoded from JSON.
func (s *System) RegistryValue(secretName, key string) any {
	s.t.Helper()
	var sec corev1.Secret
	require.NoError(s.t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: secretName}, &sec))
	var v any
	require.NoError(s.t, json.Unmarshal(sec.Data[key], &v), "registry key %s", key)
	return v
}

//go:embed testdata/crds/*.yaml
var crdFiles embed.FS

// InstallCRD installs the CRD of testdata/crds/<name>.yaml (a kubeless
// Function, inter-operator's Docker and DockerBind, a third party's Database
// that is a Provisioned Service), once per cluster, and
// waits until it is served and the System's client maps its kind.
func (s *System) InstallCRD(name string) {
	s.t.Helper()
	raw, err := crdFiles.ReadFile("testdata/crds/" + name + ".yaml")
	require.NoError(s.t, err, "no CRD %q in testenv", name)
	crd := Decode(s.t, string(raw))
	if err := s.Kube.Client.Create(context.Background(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(s.t, err)
	}
	require.EventuallyWithT(s.t, func(c *assert.CollectT) {
		var got apiextensionsv1.CustomResourceDefinition
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Name: crd.GetName()}, &got))
		established := false
		for _, cond := range got.Status.Conditions {
			established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
		}
		assert.True(c, established)
		// Discovery may lag behind Established.
		_, err := s.Kube.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: got.Spec.Group, Kind: got.Spec.Names.Kind}, got.Spec.Versions[0].Name)
		assert.NoError(c, err)
	}, 20*time.Second, 50*time.Millisecond, "the CRD %s is served", crd.GetName())
}

// WebManifest is a user's Deployment "web" in namespace, as kubectl
// applies it: one container, app, with a variable of its own (MODE), the
// workload the injection tests inject into.
func WebManifest(namespace string) string {
	return fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: example.com/web
        env: [{name: MODE, value: prod}]
`, namespace)
}
