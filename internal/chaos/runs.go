package chaos

import (
	"fmt"
	"slices"
)

// Run is a completed run of an operation on one resource, as Temporal's
// visibility and the run's result tell it.
type Run struct {
	Operation string
	// Generation is the generation of the resource the run worked on; 0
	// for a run that did nothing.
	Generation int64
	// FoundDone is, for a run that did nothing, the generation it found
	// carried out when it began (workflows.Result.FoundDone); 0 when it
	// found its resource deleted or gone.
	FoundDone int64
}

// Expected is what the workload asked of one resource.
type Expected struct {
	// Creates is the creating operation ("provision" or "bind"); Updates
	// how many updates were asked of it after that.
	Creates string
	Updates int64
	// Removed says whether the resource was then removed.
	Removed bool
}

// removal is the removing operation of each creating one.
var removal = map[string]string{"provision": "deprovision", "bind": "unbind"}

// ExactlyOnce checks a resource's completed runs against what was asked:
// one run created it, one removed it if it was removed, and every
// generation it reached was applied by exactly one run. A run that began
// again on another worker reads the spec anew, so an update asked while
// the create was being taken over is applied by the create itself, at the
// new generation; that is once, not zero times. Runs that did nothing
// (generation 0) do not count. It returns what is wrong, or nothing.
func ExactlyOnce(runs []Run, want Expected) []string {
	var problems []string
	count := map[string]int{}
	var applied []int64      // the generations the create and update runs applied
	idle := map[string]int{} // runs that ended finding nothing to do
	var found []int64        // the generations idle create and update runs found done
	for _, r := range runs {
		if r.Generation == 0 {
			idle[r.Operation]++
			if r.FoundDone != 0 && (r.Operation == want.Creates || r.Operation == "update") {
				found = append(found, r.FoundDone)
			}
			continue
		}
		count[r.Operation]++
		if r.Operation == want.Creates || r.Operation == "update" {
			applied = append(applied, r.Generation)
		}
	}
	expect := func(op string, n int) {
		if count[op] != n {
			problems = append(problems, fmt.Sprintf("%d completed %s runs, want %d", count[op], op, n))
		}
	}
	// A run whose task did the work but whose completion was lost (its
	// worker killed) is replayed; the replay finds the work done (or the
	// resource gone) and ends with generation 0. It did the work once.
	for _, op := range []string{want.Creates, removal[want.Creates]} {
		if count[op] == 0 && idle[op] > 0 {
			count[op] = 1
		}
	}
	// Likewise an update: its replay found its generation done, and no
	// completed run says it applied it, so the lost task did, once. A
	// generation some run applied and a replay found done is not twice.
	for _, g := range found {
		if !slices.Contains(applied, g) {
			applied = append(applied, g)
		}
	}
	expect(want.Creates, 1)
	if want.Removed {
		expect(removal[want.Creates], 1)
	} else {
		expect(removal[want.Creates], 0)
	}
	if count["update"] > int(want.Updates) {
		expect("update", int(want.Updates))
	}
	slices.Sort(applied)
	for i := 1; i < len(applied); i++ {
		if applied[i] == applied[i-1] {
			problems = append(problems, fmt.Sprintf("generation %d applied twice", applied[i]))
		}
	}
	if last := 1 + want.Updates; len(applied) > 0 && applied[len(applied)-1] != last {
		problems = append(problems, fmt.Sprintf("the last generation applied is %d, want %d", applied[len(applied)-1], last))
	}
	return problems
}
