package crdupgrade_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/quartermaster/qm/internal/crdupgrade"
)

// object is a schema of an object with these properties.
func object(props map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}
}

var str = apiextensionsv1.JSONSchemaProps{Type: "string"}

// plan is a definition whose versions each have a spec of these fields;
// stored lists the versions objects are stored in.
func plan(stored []string, versions map[string][]string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "sfplans.osb.servicefabrik.io"
	crd.Status.StoredVersions = stored
	for _, name := range []string{"v1alpha1", "v1beta1"} {
		fields, ok := versions[name]
		if !ok {
			continue
		}
		spec := map[string]apiextensionsv1.JSONSchemaProps{}
		for _, f := range fields {
			spec[f] = str
		}
		// A list of objects and a map, for the paths that go through them.
		spec["manager"] = apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{
			Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": str}}}}
		schema := object(map[string]apiextensionsv1.JSONSchemaProps{"spec": object(spec)})
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: name == "v1alpha1", Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &schema}})
	}
	return crd
}

func TestDecide(t *testing.T) {
	old := plan([]string{"v1alpha1"}, map[string][]string{"v1alpha1": {"name"}})
	newer := plan([]string{"v1alpha1"}, map[string][]string{"v1alpha1": {"name", "bindingRotatable"}})
	withItem := plan([]string{"v1alpha1"}, map[string][]string{"v1alpha1": {"name", "bindingRotatable"}})
	withItem.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["manager"].Items.Schema.Properties["image"] = str
	for _, tc := range []struct {
		name                 string
		installed, candidate *apiextensionsv1.CustomResourceDefinition
		apply                bool
		reason               string
	}{
		{"a new definition is installed", nil, newer, true, "not installed yet"},
		{"an upgrade that adds a field", old, newer, true, "keeps every version and field installed"},
		{"the same definition again", newer, newer, true, "keeps every version and field installed"},
		{"a rollback keeps the newer definition", newer, old, false,
			"version v1alpha1 has fields this release does not know (spec.bindingRotatable): a newer release installed it"},
		{"a field inside a list's items counts", withItem, newer, false,
			"version v1alpha1 has fields this release does not know (spec.manager[].image): a newer release installed it"},
		{"a served version this release lacks is kept",
			plan([]string{"v1alpha1"}, map[string][]string{"v1alpha1": {"name"}, "v1beta1": {"name"}}), old, false,
			"the cluster serves version v1beta1, which this release does not define"},
		{"a stored version this release lacks is kept",
			plan([]string{"v1alpha1", "v1beta1"}, map[string][]string{"v1alpha1": {"name"}}), plan(nil, map[string][]string{"v1beta1": {"name"}}), false,
			"objects are stored in version v1alpha1, which this release does not define"},
		{"a new version beside the stored one", old, plan(nil, map[string][]string{"v1alpha1": {"name"}, "v1beta1": {"name"}}), true,
			"keeps every version and field installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := crdupgrade.Decide(tc.installed, tc.candidate)
			assert.Equal(t, crdupgrade.Decision{Apply: tc.apply, Reason: tc.reason}, d)
		})
	}
}

func TestDecideNamesAFewFields(t *testing.T) {
	wide := plan([]string{"v1alpha1"}, map[string][]string{"v1alpha1": {"a", "b", "c", "d", "e", "f", "g"}})
	d := crdupgrade.Decide(wide, plan(nil, map[string][]string{"v1alpha1": {}}))
	assert.Equal(t, "version v1alpha1 has fields this release does not know (spec.a, spec.b, spec.c, spec.d, spec.e and 2 more): a newer release installed it", d.Reason)
}
