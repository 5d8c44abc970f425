package apply

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Option changes how Objects applies.
type Option func(*options)

type options struct {
	check func() error
	// createFirst and existing are Existing's.
	createFirst bool
	existing    []Ref
	// answers is Answers'.
	answers *[]*unstructured.Unstructured
}

// Answers makes Objects keep what the API server answered each write: the
// object as written, in *into, in objs' order (nil for one not written).
// A step that reads what was just applied can take it from there instead
// of reading it again.
func Answers(into *[]*unstructured.Unstructured) Option {
	return func(o *options) { o.answers = into }
}

// After makes Objects write nothing until check returns nil, and fail
// with its error otherwise. Objects runs check beside its first reads, so
// that a check made before the first write costs no time of its own: a
// provision's is a read of its instance, and each read is a round trip.
func After(check func() error) Option {
	return func(o *options) { o.check = check }
}

// ready starts the check, if there is one, and returns what each write
// waits for: the check's result, the same for all.
func (o options) ready() func() error {
	if o.check == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- o.check() }()
	return sync.OnceValue(func() error { return <-done })
}
