package chaos

import "time"

// Struck is a fault as it happened: when it struck and when it ended (the
// process back, the API server ready, the worker continued).
type Struck struct {
	Kind       Kind
	Start, End time.Time
}

// Recoveries is, by kind, each fault's recovery: the time from its end to
// the next operation that completed, less the time another fault was in
// force meanwhile. In a long run the faults follow each other closely, and
// what a later fault's downtime holds up is that downtime, imposed by the
// run, not Quartermaster's recovery from this fault; what Quartermaster
// takes after the later fault's end still counts, for both. A fault after
// which no operation completed has no recovery. faults are in the order
// they struck and do not overlap; completions are in time order.
func Recoveries(faults []Struck, completions []time.Time) map[Kind][]time.Duration {
	out := map[Kind][]time.Duration{}
	for i, f := range faults {
		for _, at := range completions {
			if at.Before(f.End) {
				continue
			}
			d := at.Sub(f.End)
			for _, later := range faults[i+1:] {
				if !later.Start.Before(at) {
					break
				}
				end := later.End
				if at.Before(end) {
					end = at
				}
				d -= end.Sub(later.Start)
			}
			out[f.Kind] = append(out[f.Kind], d)
			break
		}
	}
	return out
}
