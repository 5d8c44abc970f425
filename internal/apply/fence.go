package apply

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RenderedAnnotation stamps every object an apply writes with what it was
// rendered from: the owner (the registry Secret's UID), the generation of
// the instance or binding, and the plan's generation, as "uid/3/5". The
// stamp is the fence that keeps a stale apply out (see Fence).
const RenderedAnnotation = "quartermaster.io/rendered"

// Fence is the generation an apply rendered. A worker that was stopped in
// the middle of an apply (SIGSTOP, a long pause, a partition) can wake
// after another worker applied a newer generation of the same resource;
// its writes must then not land. So each write first reads the object,
// refuses if the object's stamp is newer than the apply's (Superseded),
// and sends the read resourceVersion as a precondition, which the API
// server enforces: a newer write between the read and the write makes the
// write fail with a conflict, and the apply reads again. An object that
// did not exist at the read is created without a precondition; that is
// the one window left (ARCHITECTURE.md, "Fencing stale applies"), which
// an object created without a read (Existing) does not have.
//
// Generations order lexicographically: the resource's, then the plan's (a
// mass update renders the same instance generation from a newer plan).
// The zero Fence fences nothing, for removals, which no newer generation
// follows.
type Fence struct {
	Generation     int64
	PlanGeneration int64
}

// Superseded is the error of an apply that a newer generation's apply
// overtook: nothing of it was written to the object it names.
type Superseded struct {
	Object            string
	Applied, Rendered Fence
}

func (e *Superseded) Error() string {
	return fmt.Sprintf("%s holds generation %s, newer than the %s this apply rendered: a newer apply overtook it, so it writes nothing",
		e.Object, e.Applied, e.Rendered)
}

func (f Fence) String() string {
	return fmt.Sprintf("%d (plan generation %d)", f.Generation, f.PlanGeneration)
}

// stamp is the RenderedAnnotation's value for what owner renders at f.
func (f Fence) stamp(owner types.UID) string {
	return fmt.Sprintf("%s/%d/%d", owner, f.Generation, f.PlanGeneration)
}

// stampFence reads the Fence of a stamp (zero if it is not one).
func stampFence(stamp string) Fence {
	parts := strings.Split(stamp, "/")
	if len(parts) != 3 {
		return Fence{}
	}
	gen, err1 := strconv.ParseInt(parts[1], 10, 64)
	planGen, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Fence{}
	}
	return Fence{Generation: gen, PlanGeneration: planGen}
}

// Ours says whether obj is one that owner's applies made: it carries
// owner's stamp, or an owner reference to it (written before stamps
// were), or to an earlier registry of the same name beside it: an earlier
// instance or binding of the same name in the same namespace, whose
// objects the garbage collector has not removed yet. No apply writes
// over, and no removal deletes, an object that is not.
func Ours(obj metav1.Object, owner Owner) bool {
	if owner.UID == "" {
		return false
	}
	if strings.HasPrefix(obj.GetAnnotations()[RenderedAnnotation], string(owner.UID)+"/") {
		return true
	}
	sameName := obj.GetNamespace() == owner.Namespace
	return slices.ContainsFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool {
		return r.UID == owner.UID || sameName && r.APIVersion == "v1" && r.Kind == "Secret" && r.Name == owner.Name
	})
}

// NotOurs is the error of an apply that met an object of the name it
// renders that Quartermaster did not make for this instance or binding:
// another's, or one a user made. Nothing is written over it.
type NotOurs struct {
	Object string
}

func (e *NotOurs) Error() string {
	return fmt.Sprintf("%s already exists and was not made by Quartermaster for this instance or binding, so it is left as it is (a plan shares an object only through the %s annotation)",
		e.Object, SingletonAnnotation)
}

// overtakenBy tells whether an object stamped stamp holds a newer
// generation of owner's than f. A stamp of another owner (an instance
// deleted and made again under the same name), or none, does not count.
func (f Fence) overtakenBy(stamp string, owner types.UID) bool {
	if f == (Fence{}) || !strings.HasPrefix(stamp, string(owner)+"/") {
		return false
	}
	applied := stampFence(stamp)
	return applied.Generation > f.Generation || applied.Generation == f.Generation && applied.PlanGeneration > f.PlanGeneration
}
