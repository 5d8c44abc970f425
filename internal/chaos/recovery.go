package chaos

import "time"

// Struck is a fault as it happened: when it struck and when it ended (the
// process back, the API server ready, the worker continued). A slow
// injection (a process slow to stop, kube-apiserver slow to come back)
// counts as the fault's own downtime, since it is inside Start..End.
type Struck struct {
	Kind       Kind
	Start, End time.Time
}

// Due says whether the next fault may strike at now. Each fault gets a
// recovery window: the next one waits until an operation completed after
// the fault's end (it recovered), or until window passed since its end,
// so that a recovery is measured with no other fault in force. prev is the
// fault before (nil for the first); completions are in time order.
func Due(prev *Struck, completions []time.Time, now time.Time, window time.Duration) bool {
	if prev == nil || !now.Before(prev.End.Add(window)) {
		return true
	}
	return len(completions) > 0 && !completions[len(completions)-1].Before(prev.End)
}

// Recoveries is, by kind, each fault's recovery (Recovery), and how many
// of them were cut short by the next fault: their window passed with
// nothing completed, and each counts as the time to the next fault's start,
// a lower bound. faults are in the order they struck and do not overlap;
// completions are in time order.
func Recoveries(faults []Struck, completions []time.Time) (map[Kind][]time.Duration, int) {
	out := map[Kind][]time.Duration{}
	cut := 0
	for i, f := range faults {
		d, ok, short := Recovery(faults, i, completions)
		if ok {
			out[f.Kind] = append(out[f.Kind], d)
		}
		if short {
			cut++
		}
	}
	return out, cut
}

// Recovery is the recovery of faults[i]: the time from its end to the next
// operation that completed, while no other fault was in force. When the
// next fault struck first, it is the time to that strike, and cut is true.
// ok is false when nothing completed after the fault at all: the workload
// had nothing left (what never completes is the stuck invariant's).
func Recovery(faults []Struck, i int, completions []time.Time) (d time.Duration, ok, cut bool) {
	end := faults[i].End
	for _, at := range completions {
		if at.Before(end) {
			continue
		}
		if i+1 < len(faults) && faults[i+1].Start.Before(at) {
			return faults[i+1].Start.Sub(end), true, true
		}
		return at.Sub(end), true, false
	}
	return 0, false, false
}

// UnderFault is how long faults were in force, in all.
func UnderFault(faults []Struck) time.Duration {
	var d time.Duration
	for _, f := range faults {
		d += f.End.Sub(f.Start)
	}
	return d
}
