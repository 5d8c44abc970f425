package healthcheck

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// Result is what one check told, and why.
type Result struct {
	Outcome primazav1alpha1.CheckResult
	Message string
}

// ConditionHealthy is the condition a service's checks keep.
const ConditionHealthy = "Healthy"

// Refresh is how old status.healthCheck.lastCheckTime may grow while
// checks agree: agreeing checks write nothing until then.
const Refresh = 10 * time.Minute

// Unchecked is the status of a service before its first check ends, or
// of one without a check (Available at once).
func Unchecked(svc *primazav1alpha1.RegisteredService) primazav1alpha1.RegisteredServiceStatus {
	st := *svc.Status.DeepCopy()
	st.ObservedGeneration = svc.Generation
	if Of(svc) == nil {
		st.State = healthy(st)
		st.HealthCheck = nil
		setCondition(&st, svc.Generation, metav1.ConditionTrue, "NoHealthCheck", "the service has no health check")
		return st
	}
	if st.State == "" {
		st.State = primazav1alpha1.ServiceUnknown
		setCondition(&st, svc.Generation, metav1.ConditionUnknown, "FirstCheckPending", "the first health check has not ended yet")
	}
	return st
}

// Decide is the status after a check of svc ended with r at now. From no
// verdict (Unknown) one result decides; a healthy service turns
// Unreachable after failureThreshold failures in a row, an Unreachable one
// healthy after successThreshold successes. Healthy is Claimed while a
// claim holds the service (as Primaza's docs say; Primaza's code loses
// the claim), Available otherwise. A check that could not run makes the
// service Unknown. Only the latest result counts.
func Decide(svc *primazav1alpha1.RegisteredService, r Result, now time.Time) primazav1alpha1.RegisteredServiceStatus {
	st := Unchecked(svc)
	hc := Of(svc)
	if hc == nil {
		return st
	}
	last := primazav1alpha1.HealthCheckStatus{}
	if st.HealthCheck != nil {
		last = *st.HealthCheck
	}
	next := primazav1alpha1.HealthCheckStatus{LastResult: r.Outcome, Message: r.Message, LastCheckTime: last.LastCheckTime}
	switch r.Outcome {
	case primazav1alpha1.CheckSucceeded:
		next.ConsecutiveSuccesses = min(last.ConsecutiveSuccesses+1, threshold(hc.SuccessThreshold))
		if st.State == primazav1alpha1.ServiceUnknown || next.ConsecutiveSuccesses >= threshold(hc.SuccessThreshold) {
			st.State = healthy(st)
		}
	case primazav1alpha1.CheckFailed:
		next.ConsecutiveFailures = min(last.ConsecutiveFailures+1, threshold(hc.FailureThreshold))
		if st.State == primazav1alpha1.ServiceUnknown || next.ConsecutiveFailures >= threshold(hc.FailureThreshold) {
			st.State = primazav1alpha1.ServiceUnreachable
		}
	default:
		st.State = primazav1alpha1.ServiceUnknown
	}
	if next.LastCheckTime == nil || !sameCheck(last, next) || now.Sub(next.LastCheckTime.Time) >= Refresh {
		next.LastCheckTime = &metav1.Time{Time: now.Truncate(time.Second)}
	}
	st.HealthCheck = &next
	switch st.State {
	case primazav1alpha1.ServiceAvailable, primazav1alpha1.ServiceClaimed:
		setCondition(&st, svc.Generation, metav1.ConditionTrue, "CheckSucceeded", r.Message)
	case primazav1alpha1.ServiceUnreachable:
		setCondition(&st, svc.Generation, metav1.ConditionFalse, "CheckFailed", r.Message)
	default:
		setCondition(&st, svc.Generation, metav1.ConditionUnknown, "CheckDidNotRun", r.Message)
	}
	return st
}

// Of is the health check of svc: healthcheck, or Primaza's spelling
// "health check"; nil when it has none.
func Of(svc *primazav1alpha1.RegisteredService) *primazav1alpha1.HealthCheck {
	if svc.Spec.HealthCheck != nil {
		return svc.Spec.HealthCheck
	}
	return svc.Spec.SeedHealthCheck
}

// The kinds of check, as the metrics label them.
const (
	KindTCP       = "tcp"
	KindHTTP      = "http"
	KindContainer = "container"
)

// KindOf is the kind of check hc runs.
func KindOf(hc *primazav1alpha1.HealthCheck) string {
	switch {
	case hc.Container != nil:
		return KindContainer
	case hc.HTTP != nil:
		return KindHTTP
	default:
		return KindTCP
	}
}

// healthy is the state of a healthy service.
func healthy(st primazav1alpha1.RegisteredServiceStatus) primazav1alpha1.ServiceState {
	if st.ClaimRef != nil {
		return primazav1alpha1.ServiceClaimed
	}
	return primazav1alpha1.ServiceAvailable
}

// sameCheck: two checks told the same thing.
func sameCheck(a, b primazav1alpha1.HealthCheckStatus) bool {
	return a.LastResult == b.LastResult && a.Message == b.Message &&
		a.ConsecutiveFailures == b.ConsecutiveFailures && a.ConsecutiveSuccesses == b.ConsecutiveSuccesses
}

func threshold(n int32) int32 { return max(n, 1) }

func setCondition(st *primazav1alpha1.RegisteredServiceStatus, gen int64, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: ConditionHealthy, Status: status, Reason: reason, Message: message, ObservedGeneration: gen,
	})
}
