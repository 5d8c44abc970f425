package chaos

import "time"

// Struck is a fault as it happened: when it struck and when it ended (the
// process back, the API server ready, the worker continued).
type Struck struct {
	Kind       Kind
	Start, End time.Time
}

// Recoveries is, by kind, each fault's recovery: the time from its end to
// the next operation that completed, less the downtime of the faults that
// struck and ended meanwhile. In a long run the faults follow each other
// closely; a later fault that ended before anything completed held the
// system up for its own downtime, which the run imposed, and only what
// Quartermaster took beyond it counts. A later fault still in force when
// an operation completed did not hold it up, and takes nothing off. A
// fault after which no operation completed has no recovery. faults are in
// the order they struck and do not overlap; completions are in time order.
func Recoveries(faults []Struck, completions []time.Time) map[Kind][]time.Duration {
	out := map[Kind][]time.Duration{}
	for i, f := range faults {
		if d, ok := Recovery(faults, i, completions); ok {
			out[f.Kind] = append(out[f.Kind], d)
		}
	}
	return out
}

// Recovery is the recovery of faults[i] (see Recoveries), and false if no
// operation completed after it.
func Recovery(faults []Struck, i int, completions []time.Time) (time.Duration, bool) {
	for _, at := range completions {
		if at.Before(faults[i].End) {
			continue
		}
		d := at.Sub(faults[i].End)
		for _, later := range faults[i+1:] {
			if later.End.After(at) {
				break
			}
			d -= later.End.Sub(later.Start)
		}
		return d, true
	}
	return 0, false
}
