package healthcheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

const (
	available   = primazav1alpha1.ServiceAvailable
	claimed     = primazav1alpha1.ServiceClaimed
	unknownS    = primazav1alpha1.ServiceUnknown
	unreachable = primazav1alpha1.ServiceUnreachable
)

var (
	holder = &primazav1alpha1.ClaimReference{Name: "claim", UID: "u-claim"}
	ok     = Result{Outcome: primazav1alpha1.CheckSucceeded, Message: "fine"}
	bad    = Result{Outcome: primazav1alpha1.CheckFailed, Message: "refused"}
	dunno  = Result{Outcome: primazav1alpha1.CheckUnknown, Message: "no image"}
)

func service(failures, successes int32, st primazav1alpha1.RegisteredServiceStatus) *primazav1alpha1.RegisteredService {
	return &primazav1alpha1.RegisteredService{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec: primazav1alpha1.RegisteredServiceSpec{HealthCheck: &primazav1alpha1.HealthCheck{
			TCP: &primazav1alpha1.TCPCheck{Host: "h", Port: 1}, FailureThreshold: failures, SuccessThreshold: successes,
		}},
		Status: st,
	}
}

// TestDecide walks the state machine of Primaza's design with thresholds.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	counts := func(f, s int32) *primazav1alpha1.HealthCheckStatus {
		return &primazav1alpha1.HealthCheckStatus{ConsecutiveFailures: f, ConsecutiveSuccesses: s}
	}
	for _, tc := range []struct {
		name       string
		thresholds [2]int32
		status     primazav1alpha1.RegisteredServiceStatus
		result     Result
		want       primazav1alpha1.ServiceState
		wantCounts [2]int32
	}{
		{"first success", [2]int32{1, 1}, primazav1alpha1.RegisteredServiceStatus{}, ok, available, [2]int32{0, 1}},
		{"first failure", [2]int32{3, 3}, primazav1alpha1.RegisteredServiceStatus{}, bad, unreachable, [2]int32{1, 0}},
		{"first check could not run", [2]int32{1, 1}, primazav1alpha1.RegisteredServiceStatus{}, dunno, unknownS, [2]int32{0, 0}},
		{"one failure under the threshold", [2]int32{3, 1}, primazav1alpha1.RegisteredServiceStatus{State: available, HealthCheck: counts(1, 0)}, bad, available, [2]int32{2, 0}},
		{"the threshold's failure", [2]int32{3, 1}, primazav1alpha1.RegisteredServiceStatus{State: available, HealthCheck: counts(2, 0)}, bad, unreachable, [2]int32{3, 0}},
		{"failures stay capped", [2]int32{3, 1}, primazav1alpha1.RegisteredServiceStatus{State: unreachable, HealthCheck: counts(3, 0)}, bad, unreachable, [2]int32{3, 0}},
		{"a success under the threshold", [2]int32{1, 2}, primazav1alpha1.RegisteredServiceStatus{State: unreachable, HealthCheck: counts(1, 0)}, ok, unreachable, [2]int32{0, 1}},
		{"the latest result decides", [2]int32{1, 1}, primazav1alpha1.RegisteredServiceStatus{State: available, HealthCheck: counts(0, 1)}, bad, unreachable, [2]int32{1, 0}},
		{"a claimed service fails", [2]int32{1, 1}, primazav1alpha1.RegisteredServiceStatus{State: claimed, ClaimRef: holder}, bad, unreachable, [2]int32{1, 0}},
		{"and returns to its claim", [2]int32{1, 1}, primazav1alpha1.RegisteredServiceStatus{State: unreachable, ClaimRef: holder, HealthCheck: counts(1, 0)}, ok, claimed, [2]int32{0, 1}},
		{"or to Available once the claim is gone", [2]int32{1, 1}, primazav1alpha1.RegisteredServiceStatus{State: unreachable, HealthCheck: counts(1, 0)}, ok, available, [2]int32{0, 1}},
		{"a check that could not run", [2]int32{3, 1}, primazav1alpha1.RegisteredServiceStatus{State: available, HealthCheck: counts(0, 1)}, dunno, unknownS, [2]int32{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(service(tc.thresholds[0], tc.thresholds[1], tc.status), tc.result, now)
			assert.Equal(t, tc.want, got.State)
			assert.Equal(t, [2]int32{got.HealthCheck.ConsecutiveFailures, got.HealthCheck.ConsecutiveSuccesses}, tc.wantCounts)
			assert.Equal(t, tc.result.Message, got.HealthCheck.Message)
			assert.Equal(t, int64(2), got.ObservedGeneration)
			c := meta.FindStatusCondition(got.Conditions, ConditionHealthy)
			if assert.NotNil(t, c) {
				assert.Equal(t, tc.result.Message, c.Message)
			}
		})
	}
}

// TestDecideWritesOnlyOnChange: a check that agrees with the last one
// leaves the status as it was until the last check time is Refresh old.
func TestDecideWritesOnlyOnChange(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	svc := service(1, 1, primazav1alpha1.RegisteredServiceStatus{})
	svc.Status = Decide(svc, ok, t0)
	assert.Equal(t, svc.Status, Decide(svc, ok, t0.Add(time.Minute)), "the same result a minute later changes nothing")
	assert.NotEqual(t, svc.Status, Decide(svc, bad, t0.Add(time.Minute)), "a new result is written")
	later := Decide(svc, ok, t0.Add(Refresh))
	assert.Equal(t, t0.Add(Refresh), later.HealthCheck.LastCheckTime.Time, "the check time is refreshed every Refresh")
}

// TestWithoutHealthCheck: a service without a check is Available at once,
// and Claimed while claimed.
func TestWithoutHealthCheck(t *testing.T) {
	svc := &primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	assert.Equal(t, available, Unchecked(svc).State)
	svc.Status.ClaimRef = holder
	assert.Equal(t, claimed, Unchecked(svc).State)
	withCheck := service(1, 1, primazav1alpha1.RegisteredServiceStatus{})
	assert.Equal(t, unknownS, Unchecked(withCheck).State, "Unknown until the first check ends")
	seed := &primazav1alpha1.RegisteredService{Spec: primazav1alpha1.RegisteredServiceSpec{SeedHealthCheck: withCheck.Spec.HealthCheck}}
	assert.Same(t, withCheck.Spec.HealthCheck, Of(seed), "Primaza's spelling is the same check")
}

// TestKindOf: the kind label of each check.
func TestKindOf(t *testing.T) {
	assert.Equal(t, KindTCP, KindOf(&primazav1alpha1.HealthCheck{TCP: &primazav1alpha1.TCPCheck{}}))
	assert.Equal(t, KindHTTP, KindOf(&primazav1alpha1.HealthCheck{HTTP: &primazav1alpha1.HTTPCheck{}}))
	assert.Equal(t, KindContainer, KindOf(&primazav1alpha1.HealthCheck{Container: &primazav1alpha1.HealthCheckContainer{}}))
}
