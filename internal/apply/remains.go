package apply

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Remains is what an object a removal deleted still means for it, as
// Remaining decides.
type Remains struct {
	// Waiting: the removal is not done while the object is there.
	Waiting bool
	// DeleteAgain: the object was written again since it was deleted (by
	// a stale worker's apply that went on after its run was taken over),
	// so it must be deleted again.
	DeleteAgain bool
	// Description is what the removal shows while it waits.
	Description string
}

// Remaining decides what obj, read after a removal deleted it (nil: it is
// gone), means for the removal of the target whose registry Secret is
// owner: nothing once it is gone, or is a shared singleton that no longer
// lists owner among its owners (it stays for the others); otherwise a
// wait, held by its finalizers if it is being deleted, or a delete to
// repeat if it is not.
func Remaining(obj *unstructured.Unstructured, owner string) Remains {
	if obj == nil || released(obj, owner) {
		return Remains{}
	}
	r := Remains{Waiting: true, Description: fmt.Sprintf("waiting for %s %s to go", obj.GetKind(), obj.GetName())}
	switch {
	case obj.GetDeletionTimestamp() == nil:
		r.DeleteAgain = true
	case len(obj.GetFinalizers()) > 0:
		r.Description += " (held by " + strings.Join(obj.GetFinalizers(), ", ") + ")"
	}
	return r
}

// released says whether obj is a singleton that no longer lists owner
// among its owners.
func released(obj *unstructured.Unstructured, owner string) bool {
	if obj.GetAnnotations()[SingletonAnnotation] != "true" {
		return false
	}
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind == "Secret" && ref.Name == owner {
			return false
		}
	}
	return true
}
