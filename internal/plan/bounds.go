package plan

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"strconv"
	"sync/atomic"
	"text/template"
	"time"
)

// Bounds limit one render of a template, so that no plan author can stop
// the worker, or starve the renders of other instances, with a template
// such as {{ range until 100000000 }}, a template that calls itself, or one
// that writes hundreds of MiB. A render that crosses one fails its
// operation with a *TemplateError that names the bound and its flag.
type Bounds struct {
	// Timeout is the wall time of one render (--render-timeout).
	Timeout time.Duration
	// MaxOutput is the most bytes a render may write (--render-max-output).
	MaxOutput int64
	// MaxMemory is the most bytes a render's functions may make, counted
	// over every string, list and map they return, and checked before a
	// function that makes something from a count (repeat, until, a printf
	// width, …) runs (--render-max-memory).
	MaxMemory int64
}

// Default bounds: far above what a plan needs (a Kubernetes object is at
// most 1.5 MiB), far below what would hurt a worker.
const (
	DefaultRenderTimeout   = 5 * time.Second
	DefaultRenderMaxOutput = 8 << 20
	DefaultRenderMaxMemory = 64 << 20
)

// DefaultBounds are the bounds of a Subject without its own.
var DefaultBounds = Bounds{Timeout: DefaultRenderTimeout, MaxOutput: DefaultRenderMaxOutput, MaxMemory: DefaultRenderMaxMemory}

// BoundError is a render that crossed one of its bounds, as its message
// says; Timeout says the bound was its time (the render may still run).
type BoundError struct {
	Msg     string
	Timeout bool
}

func (e *BoundError) Error() string { return e.Msg }

// withDefaults fills the zero bounds with the defaults.
func (b Bounds) withDefaults() Bounds {
	if b.Timeout <= 0 {
		b.Timeout = DefaultRenderTimeout
	}
	if b.MaxOutput <= 0 {
		b.MaxOutput = DefaultRenderMaxOutput
	}
	if b.MaxMemory <= 0 {
		b.MaxMemory = DefaultRenderMaxMemory
	}
	return b
}

// budget is what one render has left.
type budget struct {
	Bounds
	deadline time.Time
	made     atomic.Int64
	written  atomic.Int64
}

func newBudget(b Bounds) *budget {
	b = b.withDefaults()
	return &budget{Bounds: b, deadline: time.Now().Add(b.Timeout)}
}

func (b *budget) timeout() error {
	return &BoundError{Msg: fmt.Sprintf("the render took longer than %s (--render-timeout)", b.Timeout), Timeout: true}
}

// check fails once the render is out of time.
func (b *budget) check() error {
	if time.Now().After(b.deadline) {
		return b.timeout()
	}
	return nil
}

// charge counts n bytes made, and fails beyond MaxMemory.
func (b *budget) charge(n int64) error {
	if b.made.Add(n) > b.MaxMemory {
		return &BoundError{Msg: fmt.Sprintf("the render would make more than %d bytes (--render-max-memory)", b.MaxMemory)}
	}
	return nil
}

// Write is the render's output: it fails beyond MaxOutput, or out of time.
func (b *budget) Write(p []byte) (int, error) {
	if b.written.Add(int64(len(p))) > b.MaxOutput {
		return 0, &BoundError{Msg: fmt.Sprintf("the render wrote more than %d bytes (--render-max-output)", b.MaxOutput)}
	}
	return len(p), b.check()
}

// countArgs are the functions that make something whose size is one of
// their arguments: the index of that argument, and the bytes per unit.
var countArgs = map[string]struct{ arg, unit int }{
	"repeat": {0, 1}, "randAlphaNum": {0, 1}, "randAlpha": {0, 1}, "randNumeric": {0, 1}, "randAscii": {0, 1},
	"randBytes": {0, 2}, "until": {0, 8}, "indent": {0, 1}, "nindent": {0, 1},
}

// printfWidth finds the widths and precisions of a format's verbs.
var printfWidth = regexp.MustCompile(`%[-+# 0]*(\*|\d*)(?:\.(\*|\d*))?`)

// guard returns funcs, each checking the budget before it runs and
// charging what it returns: a function that would make too much fails
// before it allocates, and a loop of calls fails once out of time.
// text/template turns the panic into the render's error ("error calling
// repeat: ...").
func (b *budget) guard(funcs template.FuncMap) template.FuncMap {
	out := make(template.FuncMap, len(funcs)+1)
	all := maps.Clone(funcs)
	if _, ok := all["printf"]; !ok {
		all["printf"] = fmt.Sprintf // the builtin, guarded like the rest
	}
	for name, fn := range all {
		v := reflect.ValueOf(fn)
		variadic := v.Type().IsVariadic()
		out[name] = reflect.MakeFunc(v.Type(), func(args []reflect.Value) []reflect.Value {
			if err := b.before(name, args); err != nil {
				panic(err)
			}
			var res []reflect.Value
			if variadic {
				res = v.CallSlice(args)
			} else {
				res = v.Call(args)
			}
			if len(res) > 0 {
				if err := b.charge(sizeOf(res[0])); err != nil {
					panic(err)
				}
			}
			return res
		}).Interface()
	}
	return out
}

// before checks the deadline, and what a call would make from a count.
func (b *budget) before(name string, args []reflect.Value) error {
	if err := b.check(); err != nil {
		return err
	}
	var want int64
	switch {
	case name == "untilStep" && len(args) == 3:
		start, stop, step := intOf(args[0]), intOf(args[1]), intOf(args[2])
		if step != 0 {
			want = (stop - start) / step * 8
		}
	case name == "seq":
		if variadic := args[len(args)-1]; variadic.Kind() == reflect.Slice {
			for i := range variadic.Len() {
				want = max(want, abs(intOf(variadic.Index(i)))*8)
			}
		}
	case name == "printf" && len(args) > 0:
		want = b.printfSize(args)
	default:
		if c, ok := countArgs[name]; ok && len(args) > c.arg {
			want = intOf(args[c.arg]) * int64(c.unit)
		}
	}
	if want > b.MaxMemory-b.made.Load() {
		return &BoundError{Msg: fmt.Sprintf("%s would make more than the %d bytes a render may (--render-max-memory)", name, b.MaxMemory)}
	}
	return nil
}

// printfSize is the largest width or precision of a printf call's format.
func (b *budget) printfSize(args []reflect.Value) int64 {
	format, ok := args[0].Interface().(string)
	if !ok {
		return 0
	}
	var want int64
	for _, m := range printfWidth.FindAllStringSubmatch(format, -1) {
		for _, n := range m[1:] {
			if n == "*" {
				want = b.MaxMemory + 1 // a width from the data: refused outright
			} else if w, err := strconv.ParseInt(n, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
				if errors.Is(err, strconv.ErrRange) {
					w = b.MaxMemory + 1
				}
				want = max(want, w)
			}
		}
	}
	return want
}

// sizeOf estimates the bytes a function's result holds.
func sizeOf(v reflect.Value) int64 {
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return sizeOf(v.Elem())
	case reflect.String:
		return int64(v.Len())
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return int64(v.Len())
		}
		n := int64(v.Len()) * 16
		for i := range min(v.Len(), 64) { // strings in a list: sample, not walk all
			if v.Index(i).Kind() == reflect.String || v.Index(i).Kind() == reflect.Interface {
				n += sizeOf(v.Index(i)) * int64(v.Len()) / int64(min(v.Len(), 64))
			}
		}
		return n
	case reflect.Map:
		return int64(v.Len()) * 48
	default:
		return 8
	}
}

func intOf(v reflect.Value) int64 {
	for v.Kind() == reflect.Interface {
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(min(v.Uint(), 1<<62))
	case reflect.Float32, reflect.Float64:
		return int64(min(v.Float(), 1<<62))
	}
	return 0
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// within runs render, and gives up at the budget's deadline: the render is
// then left to end on its own (its next function call or write fails), and
// the operation fails on time.
func within[T any](b *budget, render func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("the render panicked: %v", p)
			}
			done <- r
		}()
		r.v, r.err = render()
	}()
	timer := time.NewTimer(time.Until(b.deadline))
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		var zero T
		return zero, b.timeout()
	}
}
