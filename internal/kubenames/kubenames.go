// Package kubenames derives Kubernetes names and label values from names
// that may be longer than those allow: an object's name may have 253
// characters, a label value 63, and a name derived from another adds a
// prefix or suffix to it.
package kubenames

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// labelKept is how much of a long value a hashed label value keeps in
// front of its hash, so that a person reading labels still recognises it.
const labelKept = 42

// Bounded keeps a derived name within the 253 characters of a name:
// prefix+name, or prefix and name's SHA-256 when that is too long.
func Bounded(prefix, name string) string {
	if len(prefix)+len(name) <= validation.DNS1123SubdomainMaxLength {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(sum[:])
}

// LabelValue is the label value that stands for name: name itself when it
// is a valid label value, otherwise its first characters and part of its
// SHA-256, which is one. The same name always gives the same value, so a
// selector can be built from the name alone; the way back is NameOf.
func LabelValue(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	kept := strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return r
		}
		return -1
	}, name)
	kept = strings.TrimLeft(kept[:min(len(kept), labelKept)], "-_.")
	hash := hex.EncodeToString(sum[:])[:validation.LabelValueMaxLength-labelKept-1]
	if kept == "" {
		return hash
	}
	return kept + "-" + hash
}

// SetLabel labels obj with key's value for name, and, when that value is
// not name itself, keeps name in the annotation of the same key, for
// NameOf to read back.
func SetLabel(obj metav1.Object, key, name string) {
	value := LabelValue(name)
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[key] = value
	obj.SetLabels(labels)
	annotations := obj.GetAnnotations()
	if value == name {
		if _, ok := annotations[key]; ok {
			delete(annotations, key)
			obj.SetAnnotations(annotations)
		}
		return
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[key] = name
	obj.SetAnnotations(annotations)
}

// NameOf is the name that obj's label key stands for: the annotation
// SetLabel kept beside a hashed value, or the label's value; "" when obj
// has no such label. An annotation whose value does not give the label's is
// not believed.
func NameOf(obj metav1.Object, key string) string {
	value := obj.GetLabels()[key]
	if value == "" {
		return ""
	}
	if name := obj.GetAnnotations()[key]; name != "" && LabelValue(name) == value {
		return name
	}
	return value
}
