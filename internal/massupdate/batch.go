package massupdate

// MaxBatch bounds the updates one batch holds, whatever the concurrency:
// a batch ends with its slowest update, so a large one leaves slots idle.
const MaxBatch = 25

// Batch is the updates one activity starts and awaits together, for the
// mass update named MassUpdate.
type Batch struct {
	MassUpdate string  `json:"massUpdate"`
	Targets    Targets `json:"targets"`
}

// Outcome is how one instance's update in a batch ended. Busy: another
// operation held the instance, and it is tried again later. Failure: the
// description of a failed update. Otherwise State is the state the update
// ended in, empty when the instance was current already and its Update
// ended at its first step.
type Outcome struct {
	Busy    bool   `json:"busy,omitempty"`
	State   string `json:"state,omitempty"`
	Failure string `json:"failure,omitempty"`
}

// BatchSize is how many of the updates a run may start now go in one
// batch, at concurrency: half of it, rounded up, so that two batches
// overlap and a slow update holds back at most half the slots; at most
// MaxBatch. Each batch is one activity, so larger batches cost Temporal
// less per update.
func BatchSize(concurrency int) int {
	return min(max(1, (concurrency+1)/2), MaxBatch)
}
