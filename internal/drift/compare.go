package drift

import (
	"encoding/base64"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Finding is the drift of one applied object.
type Finding struct {
	// Object names it: "Deployment shop/kv-1".
	Object string `json:"object"`
	// Missing: the object is gone.
	Missing bool `json:"missing,omitempty"`
	// Fields are the paths of the applied fields whose live value differs
	// or is gone, e.g. "spec.replicas", "spec.ports[name=http].port".
	// Never values: an applied value may be a credential.
	Fields []string `json:"fields,omitempty"`
}

// maxFields bounds the fields a finding names; Describe says how many more.
const maxFields = 10

// maxDescription bounds a description of findings, as a condition's
// message must stay short.
const maxDescription = 1024

// Name is how findings name an object.
func Name(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// Compare finds what of applied, as a record holds it, live no longer
// holds: each field the apply set whose value differs or is gone. Fields
// live has and applied does not (defaults, other managers' fields) are
// not drift. A nil live is a missing object.
func Compare(applied, live *unstructured.Unstructured) (Finding, bool) {
	f := Finding{Object: Name(applied)}
	if live == nil {
		f.Missing = true
		return f, true
	}
	var fields []string
	compareMap("", asStored(applied).Object, live.Object, &fields)
	fields = slices.DeleteFunc(fields, serverField)
	if len(fields) == 0 {
		return Finding{}, false
	}
	f.Fields = fields
	return f, true
}

// asStored is applied as the API server stores it, where the two differ
// by design: a Secret's stringData is write-only, kept as data, base64
// (a value in both, stringData's). Compared as applied, every Secret of a
// template that writes stringData read as drifted at every check, and its
// Repair runs followed one another without end. A copy: applied is the
// record's.
func asStored(applied *unstructured.Unstructured) *unstructured.Unstructured {
	plain, found, _ := unstructured.NestedMap(applied.Object, "stringData")
	if !found || applied.GetKind() != "Secret" || applied.GroupVersionKind().Group != "" {
		return applied
	}
	stored := applied.DeepCopy()
	unstructured.RemoveNestedField(stored.Object, "stringData")
	data, _, _ := unstructured.NestedMap(stored.Object, "data")
	if data == nil {
		data = map[string]any{}
	}
	for k, v := range plain {
		data[k] = base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(v)))
	}
	stored.Object["data"] = data
	return stored
}

// serverField says whether path is one the API server sets (never drift).
func serverField(path string) bool {
	for _, f := range serverFields {
		if p := strings.Join(f, "."); path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

func compareMap(path string, applied, live map[string]any, out *[]string) {
	keys := make([]string, 0, len(applied))
	for k := range applied {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		lv, ok := live[k]
		if !ok {
			// The API server leaves out an empty map or list ("data: {}").
			if !empty(applied[k]) {
				*out = append(*out, p)
			}
			continue
		}
		compareValue(p, applied[k], lv, out)
	}
}

func compareValue(path string, applied, live any, out *[]string) {
	switch a := applied.(type) {
	case map[string]any:
		if l, ok := live.(map[string]any); ok {
			compareMap(path, a, l, out)
			return
		}
	case []any:
		if l, ok := live.([]any); ok {
			compareList(path, a, l, out)
			return
		}
	default:
		if sameScalar(applied, live) {
			return
		}
	}
	*out = append(*out, path)
}

// compareList matches the elements of a list of named objects (containers,
// ports, volumes) by name, as server-side apply merges them, so that an
// element another manager added is no drift; other lists, by position.
func compareList(path string, applied, live []any, out *[]string) {
	if named(applied) && named(live) {
		byName := make(map[string]map[string]any, len(live))
		for _, e := range live {
			m := e.(map[string]any)
			byName[fmt.Sprint(m["name"])] = m
		}
		for _, e := range applied {
			m := e.(map[string]any)
			p := fmt.Sprintf("%s[name=%v]", path, m["name"])
			if l, ok := byName[fmt.Sprint(m["name"])]; ok {
				compareMap(p, m, l, out)
			} else {
				*out = append(*out, p)
			}
		}
		return
	}
	if len(applied) != len(live) {
		*out = append(*out, path)
		return
	}
	for i := range applied {
		compareValue(fmt.Sprintf("%s[%d]", path, i), applied[i], live[i], out)
	}
}

func empty(v any) bool {
	switch e := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(e) == 0
	case []any:
		return len(e) == 0
	}
	return false
}

// named says whether every element of list is an object with a name.
func named(list []any) bool {
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok || m["name"] == nil {
			return false
		}
	}
	return len(list) > 0
}

// sameScalar compares two leaves as the API server means them: numbers by
// value whatever their JSON type, and quantities ("500m", "0.5") by amount,
// as the server writes a quantity in its canonical form.
func sameScalar(applied, live any) bool {
	if reflect.DeepEqual(applied, live) {
		return true
	}
	a, aNum := number(applied)
	l, lNum := number(live)
	if aNum && lNum {
		return a == l
	}
	// A quantity written as a number (memory: 1073741824) comes back as
	// the server's string ("1Gi").
	aq, err1 := resource.ParseQuantity(scalarText(applied))
	lq, err2 := resource.ParseQuantity(scalarText(live))
	return err1 == nil && err2 == nil && aq.Cmp(lq) == 0
}

// scalarText is a string or number leaf as a quantity would be written.
func scalarText(v any) string {
	switch v.(type) {
	case string, int64, int, int32, float64:
		return fmt.Sprint(v)
	}
	return ""
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// Describe says what findings found, for a condition's message and an
// Event: "Deployment shop/kv-1: spec.replicas changed; Service shop/kv-1:
// deleted".
func Describe(findings []Finding) string {
	parts := make([]string, 0, len(findings))
	for _, f := range findings {
		switch {
		case f.Missing:
			parts = append(parts, f.Object+": deleted")
		default:
			fields := f.Fields
			more := ""
			if len(fields) > maxFields {
				more = fmt.Sprintf(" and %d more fields", len(fields)-maxFields)
				fields = fields[:maxFields]
			}
			parts = append(parts, f.Object+": "+strings.Join(fields, ", ")+" changed"+more)
		}
	}
	s := strings.Join(parts, "; ")
	if len(s) > maxDescription {
		s = s[:maxDescription-len(" …")] + " …"
	}
	return s
}
