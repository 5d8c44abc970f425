package a

import (
	"sync"
	"testing"

	"example.com/testenv"
)

type collect struct{}

func (collect) Errorf(string, ...any) {}

func Eventually(t testing.TB, cond func() bool)                {}
func EventuallyWithT(t testing.TB, cond func(c *collect))      {}
func Never(t testing.TB, cond func() bool)                     {}
func NoError(t interface{ Errorf(string, ...any) }, err error) {}
func Parallel(t testing.TB, n int, do func(i int) error)       {}

func TestOffGoroutine(t *testing.T) {
	s := &testenv.System{}
	Eventually(t, func() bool {
		NoError(t, nil) // want `t is passed on in a function run by Eventually`
		return true
	})
	EventuallyWithT(t, func(c *collect) {
		NoError(c, nil) // reports on its own handle: fine
		t.Fatal("x")    // want `t.Fatal in a function run by EventuallyWithT`
		t.Log("fine")
	})
	Never(t, func() bool {
		s.Do()  // want `s.Do uses the test's handle`
		s.Get() // want `s.Get uses the test's handle`
		_ = s.Name()
		return s.TryDo() != nil
	})
	Parallel(t, 3, func(int) error {
		s.Do() // want `s.Do uses the test's handle`
		return nil
	})
	check := func() bool {
		t.FailNow() // want `t.FailNow in a function run by Eventually`
		return true
	}
	Eventually(t, check)
	Eventually(t, func() bool { return check() })
	go func() {
		NoError(t, nil) // want `t is passed on in a function run by go`
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		t.Run("x", func(t *testing.T) { NoError(t, nil) }) // its own t: fine
		t.Error("Error is safe on any goroutine")
	})
	go helper(t) // want `t is passed to a goroutine`
	go func() {
		w := holder{t: t} // want `t is stored in a composite literal in a function run by go`
		_ = holder{t}     // want `t is stored in a composite literal in a function run by go`
		_ = w
		_ = holder{} // no handle: fine
	}()
	go func() {
		t.Cleanup(func() { NoError(t, nil) }) // runs on the test goroutine, after the test: fine
	}()
	NoError(t, nil) // on the test goroutine: fine
	t.Run("sub", func(t *testing.T) { NoError(t, nil) })
}

func BenchmarkOff(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		NoError(b, nil) // want `b is passed on in a function run by RunParallel`
	})
}

func helper(t *testing.T) {}

// holder keeps a test's handle, as a harness's workload does.
type holder struct{ t *testing.T }
