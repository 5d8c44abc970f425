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
		stop := watchHeap(heldBytes() + heapFactor*job.Bounds.MaxMemory)
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

// watchHeap stops the process once the memory it holds passes limit,
// until stop is called: only while a render runs, so that an idle process
// costs nothing. It looks every watchEvery, and a gigabyte made and dropped
// between two looks (or while a loaded machine keeps the watcher from
// running) would pass unseen by a look at the heap's objects; but the
// runtime gives freed memory back to the system only slowly, so stop looks
// once more at what the process holds before the render's answer.
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
				if heldBytes() > limit {
					os.Exit(exitMemory)
				}
			}
		}
	}()
	return func() {
		close(done)
		if heldBytes() > limit {
			os.Exit(exitMemory)
		}
	}
}

// heldBytes is the memory the process holds from the system: the heap's
// objects, live or not yet collected, and what the runtime keeps after
// collecting them until it gives it back.
func heldBytes() int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(sample)
	return int64(sample[0].Value.Uint64()) - int64(sample[1].Value.Uint64())
}
