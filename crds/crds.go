// Package crds holds Quartermaster's custom resources: the Go types in the
// per-group packages below it, and the CRD manifests that controller-gen
// generates from them into bases/ (`make generate`, never edited by hand).
package crds

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	servicebindingv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	servicecatalogv1alpha1 "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
)

//go:embed bases/*.yaml
var manifests embed.FS

// policies are the admission policies that belong with the CRDs. Unlike
// bases/, they are written by hand: controller-gen makes no policies.
//
//go:embed policies/*.yaml
var policies embed.FS

// AddToScheme registers every Quartermaster kind with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		osbv1alpha1.AddToScheme,
		resourcev1alpha1.AddToScheme,
		primazav1alpha1.AddToScheme,
		servicecatalogv1alpha1.AddToScheme,
		servicebindingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// NewScheme returns a scheme with the built-in Kubernetes kinds, the CRD
// kinds and every Quartermaster kind: what each of qm's clients needs.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(AddToScheme(s))
	return s
}

// NewClient returns a client of the cluster cfg reaches that knows every
// Quartermaster kind. It has no client-side rate limit (client-go's default
// is 5 requests/s, controller-runtime's 20, which would cap the worker's
// activities and the OSB API at a few operations a second); the API
// server's priority and fairness protects the server instead.
func NewClient(cfg *rest.Config) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{Scheme: NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("creating a Kubernetes client for %s: %w", cfg.Host, err)
	}
	return c, nil
}

// Definitions returns the generated CustomResourceDefinitions, which qm
// installs itself so that the binary needs no files beside it.
func Definitions() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := fs.Glob(manifests, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(paths))
	for _, p := range paths {
		raw, err := manifests.ReadFile(p)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", p, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// AdmissionPolicies returns the MutatingAdmissionPolicies, and their
// bindings, that give every new SFServiceInstance and SFServiceBinding its
// finalizer as the API server admits it (Kubernetes 1.36 and later).
func AdmissionPolicies() ([]client.Object, error) {
	paths, err := fs.Glob(policies, "policies/*.yaml")
	if err != nil {
		return nil, err
	}
	decoder := serializer.NewCodecFactory(NewScheme(), serializer.EnableStrict).UniversalDeserializer()
	var out []client.Object
	for _, p := range paths {
		raw, err := policies.ReadFile(p)
		if err != nil {
			return nil, err
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", p, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("decoding %s: %w", p, err)
			}
			out = append(out, obj.(client.Object))
		}
	}
	return out, nil
}
