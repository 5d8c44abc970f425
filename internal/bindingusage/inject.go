package bindingusage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// BindingRoot is where volumes go unless a container sets
// SERVICE_BINDING_ROOT (servicebinding.io).
const (
	BindingRoot    = "/bindings"
	BindingRootEnv = "SERVICE_BINDING_ROOT"
)

// Injection is what one usage adds to a workload.
type Injection struct {
	// Usage is the usage's name: it names the label, the annotations and
	// the volume, so that usages of one workload do not collide.
	Usage string
	// Binding is the binding's name: the volume's directory under the root.
	Binding string
	// Secret holds the credentials; Keys are its keys, Hash a digest of its
	// data (Hash).
	Secret string
	Keys   []string
	Hash   string
	// EnvPrefix is prepended to each key.
	EnvPrefix string
	// Env, when not nil, is exactly the variables to set (servicebinding.io's
	// spec.env); nil sets one per key, named with EnvPrefix (Kyma's way).
	Env []EnvVar
	// Containers, when not empty, are the only containers projected into
	// (by name); the others are left alone.
	Containers []string
	// Volume also mounts the Secret, with the files type and provider
	// (unless the Secret has those keys).
	Volume         bool
	Type, Provider string
}

// EnvVar sets a variable to a key of the Secret.
type EnvVar struct {
	Name, Key string
}

// ConflictError says that a workload already has, from someone else, a
// field the usage would set.
type ConflictError struct {
	Container string
	What      string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("container %q already has %s, set by someone else; Quartermaster never overwrites it (choose another envPrefix, or remove it)", e.Container, e.What)
}

// FieldManager is the field manager of one usage's server-side applies:
// applying nothing under it removes exactly what it added.
func FieldManager(uid types.UID) string { return "qm-usage-" + string(uid) }

// LabelKey is the label a usage puts on the pods, e.g.
// use.quartermaster.io/redis-client: "true".
func LabelKey(usage string) string { return "use.quartermaster.io/" + bound(usage, 63) }

// HashKey is the pod annotation that holds the digest of the Secret: a new
// digest rolls the workload out.
func HashKey(usage string) string { return "binding-hash.quartermaster.io/" + bound(usage, 63) }

func typeKey(usage string) string     { return "binding-type.quartermaster.io/" + bound(usage, 63) }
func providerKey(usage string) string { return "binding-provider.quartermaster.io/" + bound(usage, 63) }

// VolumeName is the name of the usage's volume (a DNS label).
func VolumeName(usage string) string {
	return bound("qm-"+strings.ReplaceAll(usage, ".", "-"), 63)
}

// bound shortens s to max characters, keeping it unique by a digest.
func bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return strings.TrimRight(s[:max-9], ".-") + "-" + hex.EncodeToString(sum[:4])
}

// Hash is the digest of a Secret's data that the pod annotation carries.
func Hash(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(data[k])
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Removal is the apply configuration that removes a usage's injection:
// nothing, under its field manager.
func Removal(obj *unstructured.Unstructured) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(obj.GetAPIVersion())
	u.SetKind(obj.GetKind())
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	return u
}

// Apply returns the apply configuration of the injection into obj at
// paths, and the names of the variables it sets. It refuses (ConflictError)
// when a container already has one of them, or the volume's path or name,
// with another value: a user's field is never overwritten.
func (in Injection) Apply(obj *unstructured.Unstructured, paths Paths) (*unstructured.Unstructured, []string, error) {
	if err := CheckLabels(obj, paths.Labels); err != nil {
		return nil, nil, err
	}
	containers, err := Containers(obj, paths.Containers)
	if err != nil {
		return nil, nil, err
	}
	vars := in.Env
	if vars == nil {
		for _, k := range in.Keys {
			vars = append(vars, EnvVar{Name: in.EnvPrefix + k, Key: k})
		}
	}
	env := make([]any, 0, len(vars))
	names := make([]string, 0, len(vars)+1)
	for _, v := range vars {
		env = append(env, map[string]any{"name": v.Name,
			"valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": in.Secret, "key": v.Key}}})
		names = append(names, v.Name)
	}
	annotations := map[string]any{HashKey(in.Usage): in.Hash}
	applied := make([]any, 0, len(containers))
	for _, c := range containers {
		name := c["name"].(string)
		if len(in.Containers) > 0 && !slices.Contains(in.Containers, name) {
			continue
		}
		mine := map[string]any{"name": name}
		cenv := slices.Clone(env)
		if in.Volume {
			root, set := rootOf(c)
			if !set {
				cenv = append(cenv, map[string]any{"name": BindingRootEnv, "value": root})
			}
			mount := map[string]any{"name": VolumeName(in.Usage), "mountPath": root + "/" + in.Binding, "readOnly": true}
			if err := conflicts(name, c, "volumeMounts", "mountPath", mount); err != nil {
				return nil, nil, err
			}
			mine["volumeMounts"] = []any{mount}
		}
		if err := conflicts(name, c, "env", "name", cenv...); err != nil {
			return nil, nil, err
		}
		if len(cenv) > 0 {
			mine["env"] = cenv
		}
		applied = append(applied, mine)
	}
	u := Removal(obj)
	set := func(path string, v any) {
		_ = unstructured.SetNestedField(u.Object, v, strings.Split(path, ".")...)
	}
	set(paths.Labels, map[string]any{LabelKey(in.Usage): "true"})
	set(paths.Containers, applied)
	if in.Volume {
		volume, err := in.volume(obj, paths, annotations)
		if err != nil {
			return nil, nil, err
		}
		set(paths.Volumes(), []any{volume})
		if !slices.Contains(names, BindingRootEnv) {
			names = append(names, BindingRootEnv)
		}
	}
	set(paths.Annotations(), annotations)
	return u, names, nil
}

// volume is the projected volume of the Secret, with type and provider
// from pod annotations where the Secret lacks them.
func (in Injection) volume(obj *unstructured.Unstructured, paths Paths, annotations map[string]any) (map[string]any, error) {
	var items []any
	for _, f := range []struct{ file, key, value string }{
		{"type", typeKey(in.Usage), in.Type}, {"provider", providerKey(in.Usage), in.Provider},
	} {
		if slices.Contains(in.Keys, f.file) || f.value == "" {
			continue
		}
		annotations[f.key] = f.value
		items = append(items, map[string]any{"path": f.file,
			"fieldRef": map[string]any{"fieldPath": fmt.Sprintf("metadata.annotations['%s']", f.key)}})
	}
	sources := []any{map[string]any{"secret": map[string]any{"name": in.Secret}}}
	if len(items) > 0 {
		sources = append(sources, map[string]any{"downwardAPI": map[string]any{"items": items}})
	}
	volume := map[string]any{"name": VolumeName(in.Usage), "projected": map[string]any{"sources": sources}}
	live, _, _ := unstructured.NestedFieldNoCopy(obj.Object, strings.Split(paths.Volumes(), ".")...)
	list, _ := live.([]any)
	for _, v := range list {
		// The API server defaults fields of a projected volume: one of the
		// same name that is projected is the usage's own.
		if m, ok := v.(map[string]any); ok && m["name"] == volume["name"] && m["projected"] == nil {
			return nil, &ConflictError{Container: "(pod)", What: fmt.Sprintf("a volume named %s", volume["name"])}
		}
	}
	return volume, nil
}

// rootOf is the container's SERVICE_BINDING_ROOT, and whether the
// container sets it itself (with a value other than the one injected).
func rootOf(c map[string]any) (string, bool) {
	env, _ := c["env"].([]any)
	for _, e := range env {
		m, _ := e.(map[string]any)
		if m["name"] == BindingRootEnv {
			if v, _ := m["value"].(string); v != "" {
				return v, v != BindingRoot
			}
		}
	}
	return BindingRoot, false
}

// conflicts returns a ConflictError if the container's list field has an
// item with the same key as one of want, but is not equal to it.
func conflicts(container string, c map[string]any, field, key string, want ...any) error {
	live, _ := c[field].([]any)
	for _, w := range want {
		wm := w.(map[string]any)
		for _, l := range live {
			lm, _ := l.(map[string]any)
			if lm[key] == wm[key] && !reflect.DeepEqual(lm, wm) {
				what := fmt.Sprintf("the environment variable %s", wm[key])
				if field == "volumeMounts" {
					what = fmt.Sprintf("a volume mounted at %s", wm[key])
				}
				return &ConflictError{Container: container, What: what}
			}
		}
	}
	return nil
}
