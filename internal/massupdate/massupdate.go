// Package massupdate is Service Fabrik's mass update as pure logic: which
// instances a run selects, whether one is already current, when failures
// exhaust the budget, and what a run's progress says (rate, ETA). It has
// no Temporal in it; workflows/massupdate.go runs it.
package massupdate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// States of a run.
const (
	Running   = "running"
	Paused    = "paused"
	Completed = "completed"
	Cancelled = "cancelled"
)

// DefaultConcurrency is how many updates a run keeps in flight unless told.
const DefaultConcurrency = 10

// Selector says which instances a run updates: those of the plans (by OSB
// plan ID), of the service, in the namespace and with the labels given;
// All selects every instance. At least one is needed.
type Selector struct {
	PlanIDs   []string `json:"plans,omitempty"`
	ServiceID string   `json:"service,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	Labels    string   `json:"selector,omitempty"`
	All       bool     `json:"all,omitempty"`
}

// Validate says what is wrong with a selector.
func (s Selector) Validate() error {
	narrowed := len(s.PlanIDs) > 0 || s.ServiceID != "" || s.Namespace != "" || s.Labels != ""
	switch {
	case !narrowed && !s.All:
		return errors.New("select instances with plans, service, namespace or selector, or all: true for every instance")
	case narrowed && s.All:
		return errors.New("all: true selects every instance; give it without plans, service, namespace or selector")
	}
	if _, err := labels.Parse(s.Labels); err != nil {
		return fmt.Errorf("selector %q: %w", s.Labels, err)
	}
	return nil
}

// Matches says whether the selector selects the instance by its plan and
// service (namespace and labels are the list's options).
func (s Selector) Matches(inst *osbv1alpha1.SFServiceInstance) bool {
	if len(s.PlanIDs) > 0 && !slices.Contains(s.PlanIDs, inst.Spec.PlanID) {
		return false
	}
	return s.ServiceID == "" || s.ServiceID == inst.Spec.ServiceID
}

// Current says whether an instance was last rendered from the plan's
// generation planGeneration or a later one, and needs no update.
func Current(inst *osbv1alpha1.SFServiceInstance, planGeneration int64) bool {
	return inst.Status.AppliedPlanGeneration >= planGeneration
}

// Budget is how many failed updates pause a run: a count, or a percentage
// of the run's instances. The zero Budget never pauses.
type Budget struct {
	Count   int `json:"count,omitempty"`
	Percent int `json:"percent,omitempty"`
}

// ParseBudget reads "5" or "10%"; "" is no budget.
func ParseBudget(s string) (Budget, error) {
	if s == "" {
		return Budget{}, nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || n < 1 {
		return Budget{}, fmt.Errorf("maxFailures %q: give a count of at least 1 (\"5\") or a percentage (\"10%%\")", s)
	}
	if strings.HasSuffix(s, "%") {
		if n > 100 {
			return Budget{}, fmt.Errorf("maxFailures %q: a percentage is at most 100%%", s)
		}
		return Budget{Percent: n}, nil
	}
	return Budget{Count: n}, nil
}

// Limit is the number of failures that pauses a run of total instances (0:
// none). A percentage rounds up, so that 10% of 5 is 1.
func (b Budget) Limit(total int) int {
	if b.Percent > 0 {
		return max(1, (total*b.Percent+99)/100)
	}
	return b.Count
}

// String is the budget as given.
func (b Budget) String() string {
	if b.Percent > 0 {
		return fmt.Sprintf("%d%%", b.Percent)
	}
	return strconv.Itoa(b.Count)
}

// Request asks for a mass update.
type Request struct {
	// Name names the run: its workflow ID is massupdate/<name>.
	Name     string   `json:"name"`
	Selector Selector `json:"selector"`
	// Concurrency is the most updates in flight (default 10); Rate, when
	// set, the most started per second.
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	// Canary updates this many instances first, then pauses.
	Canary      int    `json:"canary,omitempty"`
	MaxFailures Budget `json:"maxFailures,omitempty"`
}

// Steering actions.
const (
	Pause          = "pause"
	Resume         = "resume"
	Cancel         = "cancel"
	SetConcurrency = "concurrency"
)

// Steer is the signal that steers a run: pause, resume, cancel, or a new
// concurrency.
type Steer struct {
	Action      string `json:"action"`
	Concurrency int    `json:"concurrency,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// By is the admin who sent it, as the admin API authenticated them.
	By string `json:"by,omitempty"`
}

// Steering is a steering signal a run obeyed: what, who sent it, and when.
type Steering struct {
	Action string    `json:"action"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

// MaxSteerings is how many of its latest steerings a run keeps.
const MaxSteerings = 20

// Failure is an update that failed, with the description of its outcome.
type Failure struct {
	Instance    string `json:"instance"`
	Description string `json:"description"`
}

// Progress is what a run reports of itself.
type Progress struct {
	State string `json:"state"`
	// Reason says why a run is paused or how it ended.
	Reason      string    `json:"reason,omitempty"`
	Total       int       `json:"total"`
	Succeeded   int       `json:"succeeded"`
	Failed      int       `json:"failed"`
	Skipped     int       `json:"skipped"`
	InFlight    int       `json:"inFlight"`
	Remaining   int       `json:"remaining"`
	Concurrency int       `json:"concurrency"`
	Started     time.Time `json:"started"`
	// Rate is the updates finished per second since the run started; ETA
	// the time the rest take at that rate.
	Rate     float64       `json:"rate"`
	ETA      time.Duration `json:"eta"`
	Failures []Failure     `json:"failures,omitempty"`
	// Steered are the latest steering signals the run obeyed, oldest
	// first, each with who sent it.
	Steered []Steering `json:"steered,omitempty"`
}

// Record keeps s, obeyed at at, among the latest MaxSteerings.
func (p *Progress) Record(s Steer, at time.Time) {
	p.Steered = append(p.Steered, Steering{Action: s.Action, By: s.By, At: at})
	if n := len(p.Steered); n > MaxSteerings {
		p.Steered = p.Steered[n-MaxSteerings:]
	}
}

// Done is the number of instances the run is finished with.
func (p Progress) Done() int { return p.Succeeded + p.Failed + p.Skipped }

// Measure fills in the rate and the ETA at now.
func (p *Progress) Measure(now time.Time) {
	elapsed := now.Sub(p.Started).Seconds()
	p.Rate, p.ETA = 0, 0
	if elapsed <= 0 {
		return
	}
	p.Rate = float64(p.Succeeded+p.Failed) / elapsed
	if p.Rate > 0 {
		p.ETA = time.Duration(float64(p.Remaining+p.InFlight) / p.Rate * float64(time.Second)).Round(time.Second)
	}
}

// Line is the progress as one line: "running: 120/200 (118 succeeded, 2
// failed, 0 skipped), 10 in flight, 25.3/s, ETA 3s".
func (p Progress) Line() string {
	s := fmt.Sprintf("%s: %d/%d (%d succeeded, %d failed, %d skipped), %d in flight, %.1f/s",
		p.State, p.Done(), p.Total, p.Succeeded, p.Failed, p.Skipped, p.InFlight, p.Rate)
	if p.State == Running && p.ETA > 0 {
		s += ", ETA " + p.ETA.String()
	}
	if p.Reason != "" {
		s += "; " + p.Reason
	}
	return s
}
