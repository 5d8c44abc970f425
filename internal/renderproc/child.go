package renderproc

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"runtime/metrics"
	"time"

	"github.com/quartermaster/qm/internal/plan"
)

// watchEvery is how often a render process looks at its heap.
const watchEvery = 2 * time.Millisecond

func init() {
	if os.Getenv(childEnv) != "1" {
		return
	}
	serve(os.Stdin, os.Stdout)
	os.Exit(0)
}

// serve renders the jobs of in, one at a time, answering each on out, until
// in ends. A render that times out ends the process after its answer: the
// render may run on.
func serve(in io.Reader, out io.Writer) {
	dec := json.NewDecoder(bufio.NewReader(in))
	enc := json.NewEncoder(out)
	if enc.Encode(reply{Ready: true}) != nil {
		return
	}
	for {
		var job plan.Job
		if err := dec.Decode(&job); err != nil {
			return
		}
		stop := watchHeap(heapBytes() + heapFactor*job.Bounds.MaxMemory)
		res, err := plan.Run(job)
		stop()
		var r reply
		r.Result = res
		if err != nil {
			var bound *plan.BoundError
			r.Err, r.Bound = err.Error(), errors.As(err, &bound)
			r.Exit = r.Bound && bound.Timeout
		}
		if enc.Encode(r) != nil || r.Exit {
			return
		}
	}
}

// watchHeap stops the process once its heap passes limit, until stop is
// called: only while a render runs, so that an idle process costs nothing.
func watchHeap(limit int64) (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if heapBytes() > limit {
					os.Exit(exitMemory)
				}
			}
		}
	}()
	return func() { close(done) }
}

// heapBytes is the memory the heap's objects hold, live or not yet
// collected.
func heapBytes() int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return int64(sample[0].Value.Uint64())
}
