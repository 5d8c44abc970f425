// Package sharding splits the watcher's work between several watchers,
// Flux-style: each object of a sharded kind carries a label that names its
// bucket, and each watcher shard owns a fixed set of buckets, which its
// informers select on the API server. An object's bucket never changes
// with the number of shards, so scaling the watchers out relabels nothing.
package sharding

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Label holds an object's bucket, "0" to "63".
const Label = "quartermaster.io/shard"

// Buckets is how many buckets the objects fall into: the most shards there
// can be. 64 spreads evenly enough over the shard counts a platform runs
// (two to eight), and keeps a shard's selector short.
const Buckets = 64

// Shard is one watcher's part of the work: shard Index of Count.
type Shard struct {
	Index, Count int
}

// Whole is the one watcher that owns every object, the default.
var Whole = Shard{Index: 0, Count: 1}

// Parse reads a shard as `N/M` (shard N of M, N from 0), as
// `qm watcher --shard` takes it; an empty text is the whole.
func Parse(text string) (Shard, error) {
	if text == "" {
		return Whole, nil
	}
	n, m, ok := strings.Cut(text, "/")
	index, err1 := strconv.Atoi(n)
	count, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("shard %q: want N/M, such as 0/3", text)
	}
	s := Shard{Index: index, Count: count}
	return s, s.Validate()
}

// Validate says what is wrong with a shard, if anything.
func (s Shard) Validate() error {
	switch {
	case s.Count < 1 || s.Count > Buckets:
		return fmt.Errorf("shard %d/%d: the number of shards must be 1 to %d", s.Index, s.Count, Buckets)
	case s.Index < 0 || s.Index >= s.Count:
		return fmt.Errorf("shard %d/%d: the shard must be 0 to %d", s.Index, s.Count, s.Count-1)
	}
	return nil
}

// String is the shard as Parse reads it.
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Sharded is true when the work is split, so that objects need their
// label and the informers select on it.
func (s Shard) Sharded() bool { return s.Count > 1 }

// First is true for the shard that also does the work no object's bucket
// decides: the cluster-wide kinds' and the registry's.
func (s Shard) First() bool { return s.Index == 0 }

// Owns is true when the shard owns bucket b.
func (s Shard) Owns(b int) bool { return b%s.Count == s.Index }

// OwnsObject is true when the shard owns obj by its label. An object
// without a valid label is owned by no shard until it is stamped.
func (s Shard) OwnsObject(obj client.Object) bool {
	if !s.Sharded() {
		return true
	}
	b, ok := BucketOf(obj)
	return ok && s.Owns(b)
}

// Selector selects the objects of the shard's buckets.
func (s Shard) Selector() labels.Selector {
	var values []string
	for b := range Buckets {
		if s.Owns(b) {
			values = append(values, strconv.Itoa(b))
		}
	}
	return selectorOf(selection.In, values)
}

// Unstamped selects the objects whose label is missing or names no bucket:
// the objects no shard owns yet.
func Unstamped() labels.Selector {
	values := make([]string, Buckets)
	for b := range Buckets {
		values[b] = strconv.Itoa(b)
	}
	return selectorOf(selection.NotIn, values)
}

func selectorOf(op selection.Operator, values []string) labels.Selector {
	req, err := labels.NewRequirement(Label, op, values)
	if err != nil {
		// The label and its values are this package's constants.
		panic(fmt.Sprintf("sharding: the selector of %v: %v", values, err))
	}
	return labels.NewSelector().Add(*req)
}

// Bucket is the bucket of a shard key.
func Bucket(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % Buckets)
}

// BucketOf reads obj's bucket from its label.
func BucketOf(obj client.Object) (int, bool) {
	v, ok := obj.GetLabels()[Label]
	if !ok {
		return 0, false
	}
	b, err := strconv.Atoi(v)
	if err != nil || b < 0 || b >= Buckets || strconv.Itoa(b) != v {
		return 0, false
	}
	return b, true
}

// Key is the shard key of an object of a sharded kind: an instance's OSB
// ID, and for a binding the ID of its instance, so that an instance and its
// bindings belong to one shard. The OSB objects of a platform all live in
// the broker's one namespace, so the namespace would not spread them.
func Key(obj client.Object) (string, bool) {
	switch o := obj.(type) {
	case *osbv1alpha1.SFServiceInstance:
		return o.OSBID(), true
	case *osbv1alpha1.SFServiceBinding:
		if o.Spec.InstanceID != "" {
			return o.Spec.InstanceID, true
		}
		return o.Name, true
	}
	return "", false
}

// Stamp sets obj's label to its bucket and says whether it changed it; an
// object of a kind that is not sharded is left alone.
func Stamp(obj client.Object) bool {
	key, ok := Key(obj)
	if !ok {
		return false
	}
	want := strconv.Itoa(Bucket(key))
	l := obj.GetLabels()
	if l[Label] == want {
		return false
	}
	if l == nil {
		l = map[string]string{}
	}
	l[Label] = want
	obj.SetLabels(l)
	return true
}

// Kinds are the sharded kinds: the OSB operations, which are most of the
// objects and of the work. Every other kind is the first shard's.
func Kinds() []client.Object {
	return []client.Object{&osbv1alpha1.SFServiceInstance{}, &osbv1alpha1.SFServiceBinding{}}
}
