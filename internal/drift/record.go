package drift

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// SecretType is the type of the Secrets that record what an instance's
// last operation applied. A Secret, because rendered objects may hold
// credentials (a generated password in a StatefulSet's env, say).
const SecretType corev1.SecretType = "quartermaster.io/applied"

// Label marks the record Secrets, with their instance's or binding's name
// as its value: the watcher's cache of Secrets leaves them out by it, as it
// leaves out the registries.
const Label = "quartermaster.io/applied"

// DataKey is the key of the record in its Secret.
const DataKey = "applied.json"

// SecretName is the name of the record of the instance or binding name:
// qm-applied-<name> for an instance, qm-bind-applied-<name> for a binding
// (an instance and a binding of the same name share a namespace, and no
// prefix of Quartermaster's Secrets is another's).
func SecretName(kind lifecycle.Kind, name string) string {
	if kind == lifecycle.KindBinding {
		return kubenames.Bounded("qm-bind-applied-", name)
	}
	return kubenames.Bounded("qm-applied-", name)
}

// Record is what one operation (a provision, an update, a bind) applied:
// the objects as it sent them to
// the API server (its apply configuration, so exactly the fields its
// field manager owns), and the generations it rendered.
type Record struct {
	// Generation and PlanGeneration are the instance's (or binding's) and
	// the plan's generations the objects were rendered from.
	Generation     int64                       `json:"generation"`
	PlanGeneration int64                       `json:"planGeneration"`
	Objects        []unstructured.Unstructured `json:"objects"`
}

// serverFields are the fields of an object that the API server sets, not
// the apply: a record leaves them out, and a comparison never looks at
// them.
var serverFields = [][]string{
	{"metadata", "resourceVersion"}, {"metadata", "uid"}, {"metadata", "generation"},
	{"metadata", "creationTimestamp"}, {"metadata", "managedFields"}, {"status"},
}

// NewRecord records objs, as sent, for what generation and planGeneration
// rendered. The objects are copied.
func NewRecord(generation, planGeneration int64, objs []*unstructured.Unstructured) Record {
	r := Record{Generation: generation, PlanGeneration: planGeneration, Objects: make([]unstructured.Unstructured, 0, len(objs))}
	for _, o := range objs {
		c := o.DeepCopy()
		for _, f := range serverFields {
			unstructured.RemoveNestedField(c.Object, f...)
		}
		r.Objects = append(r.Objects, *c)
	}
	return r
}

// Current says whether the record is of the render of the instance's (or
// binding's) generation from its plan's generation: a record of an older
// one (an update whose record was not written, a plan changed since) is no
// measure of drift.
func (r Record) Current(generation, planGeneration int64) bool {
	return r.Generation == generation && r.PlanGeneration == planGeneration
}

// Encode returns the Secret data of the record.
func (r Record) Encode() (map[string][]byte, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding the record of applied objects: %w", err)
	}
	return map[string][]byte{DataKey: raw}, nil
}

// Decode reads a record from its Secret's data.
func Decode(data map[string][]byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data[DataKey], &r); err != nil {
		return Record{}, fmt.Errorf("reading the record of applied objects: %w", err)
	}
	return r, nil
}

// Secret is the record's Secret for the instance or binding
// namespace/name, owned by owner (its registry Secret, so that it goes
// with the registry).
func Secret(kind lifecycle.Kind, namespace, name string, owner metav1.OwnerReference, r Record) (*corev1.Secret, error) {
	data, err := r.Encode()
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(kind, name), Namespace: namespace, OwnerReferences: []metav1.OwnerReference{owner}},
		Type:       SecretType,
		Data:       data,
	}
	kubenames.SetLabel(s, Label, name)
	return s, nil
}
