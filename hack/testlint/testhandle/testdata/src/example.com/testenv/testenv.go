// Package testenv stands in for the harness: a System that keeps its test's handle.
package testenv

import "testing"

type System struct{ t testing.TB }

func fail(t testing.TB, err error) {
	if err != nil {
		t.Fatal(err)
	}
}

// Do passes its handle on: calling it off the test goroutine is passing the handle.
func (s *System) Do() { fail(s.t, nil) } // want Do:"usesHandle"

// Get goes through Do.
func (s *System) Get() { s.Do() } // want Get:"usesHandle"

// Name only reads; it is safe anywhere.
func (s *System) Name() string { s.t.Helper(); return "x" }

// TryDo returns an error instead.
func (s *System) TryDo() error { return nil }

func Eventually(t testing.TB, cond func() bool) {}

// Soon is the harness doing it wrong itself.
func (s *System) Soon() { // want Soon:"usesHandle"
	Eventually(s.t, func() bool {
		fail(s.t, nil) // want `s.t is passed on in a function run by Eventually`
		return true
	})
}
