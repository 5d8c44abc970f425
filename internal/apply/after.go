package apply

import "sync"

// Option changes how Objects applies.
type Option func(*options)

type options struct {
	check func() error
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
