// Package crdupgrade installs a release's CustomResourceDefinitions on a
// cluster, forward only. Helm never changes what a chart keeps in crds/,
// so every release applies its own (`qm crds apply`, the chart's hook Job)
// before its components start. A definition replaces the installed one
// only when it keeps everything that one has: every version it serves or
// that objects are stored in, and every field of each version's schema. A
// rollback's older release therefore leaves the newer definitions in
// place, and the API server does not prune the fields the newer release
// wrote from the objects that the older one updates; the older release
// ignores what it does not know.
package crdupgrade

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Decision says whether a release's definition may replace the one
// installed, and why.
type Decision struct {
	Apply  bool
	Reason string
}

// maxNamed bounds how many fields a reason names.
const maxNamed = 5

// Decide says whether candidate may replace installed (nil when the
// cluster has none).
func Decide(installed, candidate *apiextensionsv1.CustomResourceDefinition) Decision {
	if installed == nil {
		return Decision{Apply: true, Reason: "not installed yet"}
	}
	versions := map[string]*apiextensionsv1.CustomResourceDefinitionVersion{}
	for i := range candidate.Spec.Versions {
		versions[candidate.Spec.Versions[i].Name] = &candidate.Spec.Versions[i]
	}
	for _, stored := range installed.Status.StoredVersions {
		if versions[stored] == nil {
			return Decision{Reason: fmt.Sprintf("objects are stored in version %s, which this release does not define", stored)}
		}
	}
	for _, v := range installed.Spec.Versions {
		mine := versions[v.Name]
		if mine == nil {
			if v.Served {
				return Decision{Reason: fmt.Sprintf("the cluster serves version %s, which this release does not define", v.Name)}
			}
			continue
		}
		if lost := missing(fields(v.Schema), fields(mine.Schema)); len(lost) > 0 {
			return Decision{Reason: fmt.Sprintf("version %s has fields this release does not know (%s): a newer release installed it", v.Name, named(lost))}
		}
	}
	return Decision{Apply: true, Reason: "keeps every version and field installed"}
}

// fields are the paths of every property a schema declares, e.g.
// "spec.rotation.every", "spec.items[].name", "metadata.labels{}".
func fields(v *apiextensionsv1.CustomResourceValidation) map[string]bool {
	out := map[string]bool{}
	if v != nil && v.OpenAPIV3Schema != nil {
		walk(v.OpenAPIV3Schema, "", out)
	}
	return out
}

func walk(s *apiextensionsv1.JSONSchemaProps, path string, out map[string]bool) {
	for name, prop := range s.Properties {
		p := strings.TrimPrefix(path+"."+name, ".")
		out[p] = true
		walk(&prop, p, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(s.Items.Schema, path+"[]", out)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		out[path+"{}"] = true
		walk(s.AdditionalProperties.Schema, path+"{}", out)
	}
}

// missing are the paths of have that want lacks, sorted.
func missing(have, want map[string]bool) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(have)) {
		if !want[p] {
			out = append(out, p)
		}
	}
	return out
}

func named(paths []string) string {
	if len(paths) <= maxNamed {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(paths[:maxNamed], ", "), len(paths)-maxNamed)
}
