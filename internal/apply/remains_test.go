package apply_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster/qm/internal/apply"
)

// TestRemaining: what an object read after a removal deleted it means.
func TestRemaining(t *testing.T) {
	object := func(edit func(*unstructured.Unstructured)) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		obj.SetKind("ConfigMap")
		obj.SetName("db-config")
		edit(obj)
		return obj
	}
	deleting := func(o *unstructured.Unstructured) { o.SetDeletionTimestamp(new(metav1.Now())) }
	singleton := func(owners ...string) func(*unstructured.Unstructured) {
		return func(o *unstructured.Unstructured) {
			o.SetAnnotations(map[string]string{apply.SingletonAnnotation: "true"})
			var refs []metav1.OwnerReference
			for _, name := range owners {
				refs = append(refs, metav1.OwnerReference{Kind: "Secret", Name: name})
			}
			o.SetOwnerReferences(refs)
		}
	}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want apply.Remains
	}{
		{"gone: nothing to wait for", nil, apply.Remains{}},
		{"being deleted: a wait", object(deleting),
			apply.Remains{Waiting: true, Description: "waiting for ConfigMap db-config to go"}},
		{"held by finalizers: a wait that names them", object(func(o *unstructured.Unstructured) {
			deleting(o)
			o.SetFinalizers([]string{"example.com/backup", "example.com/audit"})
		}), apply.Remains{Waiting: true, Description: "waiting for ConfigMap db-config to go (held by example.com/backup, example.com/audit)"}},
		{"written again since its deletion: deleted again", object(func(*unstructured.Unstructured) {}),
			apply.Remains{Waiting: true, DeleteAgain: true, Description: "waiting for ConfigMap db-config to go"}},
		{"a singleton the target let go of stays for the others", object(singleton("qm-registry-other")), apply.Remains{}},
		{"a singleton the target still owns: deleted again", object(singleton("qm-registry-other", "qm-registry-mine")),
			apply.Remains{Waiting: true, DeleteAgain: true, Description: "waiting for ConfigMap db-config to go"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, apply.Remaining(tc.obj, "qm-registry-mine"))
		})
	}
}
