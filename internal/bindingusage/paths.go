package bindingusage

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Default containers paths, tried in this order when a UsageKind names none.
var defaultContainers = []string{
	"spec.template.spec.containers",
	"spec.jobTemplate.spec.template.spec.containers",
}

// PathError says that a UsageKind's path does not lead where it should in a
// workload.
type PathError struct {
	// Field is "labelsPath" or "containersPath".
	Field string
	Path  string
	Why   string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Field, e.Path, e.Why)
}

// Paths are where a usage writes in a workload.
type Paths struct {
	// Labels is the pod template's labels map; its annotations are beside it.
	Labels string
	// Containers is the pod template's containers; its volumes are beside them.
	Containers string
}

// Annotations is the path of the pod template's annotations.
func (p Paths) Annotations() string { return sibling(p.Labels, "annotations") }

// Volumes is the path of the pod template's volumes.
func (p Paths) Volumes() string { return sibling(p.Containers, "volumes") }

func sibling(path, name string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i+1] + name
	}
	return name
}

// ContainersPath is the containers path of obj: the UsageKind's, or the
// first default that leads to a pod template.
func ContainersPath(obj *unstructured.Unstructured, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	for _, p := range defaultContainers {
		template := strings.Split(p, ".")
		if _, found, _ := unstructured.NestedMap(obj.Object, template[:len(template)-2]...); found {
			return p, nil
		}
	}
	return "", &PathError{Field: "containersPath", Path: "(default)",
		Why: "no pod template at spec.template or spec.jobTemplate.spec.template; set the UsageKind's containersPath"}
}

// Containers returns the containers at path in obj, each a map with a name.
func Containers(obj *unstructured.Unstructured, path string) ([]map[string]any, error) {
	fields := strings.Split(path, ".")
	if err := walk(obj, "containersPath", path, len(fields)); err != nil {
		return nil, err
	}
	raw, _, _ := unstructured.NestedFieldNoCopy(obj.Object, fields...)
	list, ok := raw.([]any)
	if !ok {
		return nil, &PathError{Field: "containersPath", Path: path, Why: fmt.Sprintf("is a %T, not a list of containers", raw)}
	}
	if len(list) == 0 {
		return nil, &PathError{Field: "containersPath", Path: path, Why: "lists no container"}
	}
	out := make([]map[string]any, 0, len(list))
	for i, item := range list {
		c, ok := item.(map[string]any)
		if name, _ := c["name"].(string); !ok || name == "" {
			return nil, &PathError{Field: "containersPath", Path: path, Why: fmt.Sprintf("item %d is not a container with a name", i)}
		}
		out = append(out, c)
	}
	return out, nil
}

// CheckLabels checks that the labels path can hold labels in obj: every
// element up to the pod template exists and is a map; the template's
// metadata and labels may be missing (injection creates them, as Kyma
// asks).
func CheckLabels(obj *unstructured.Unstructured, path string) error {
	return walk(obj, "labelsPath", path, len(strings.Split(path, "."))-2)
}

// walk checks that the first n elements of path exist in obj as maps (the
// last one of a containers path is the list itself), and that the rest,
// where present, are maps too.
func walk(obj *unstructured.Unstructured, field, path string, n int) error {
	fields := strings.Split(path, ".")
	var cur any = obj.Object
	for i, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return &PathError{Field: field, Path: path, Why: fmt.Sprintf("%s is a %T, not an object", strings.Join(fields[:i], "."), cur)}
		}
		next, found := m[f]
		if !found || next == nil {
			if i < n {
				return &PathError{Field: field, Path: path, Why: fmt.Sprintf("%s is not in %s %s", strings.Join(fields[:i+1], "."), obj.GetKind(), obj.GetName())}
			}
			return nil
		}
		cur = next
	}
	if field == "labelsPath" {
		if _, ok := cur.(map[string]any); !ok {
			return &PathError{Field: field, Path: path, Why: fmt.Sprintf("is a %T, not a map of labels", cur)}
		}
	}
	return nil
}
