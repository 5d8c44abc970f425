package healthcheck

import (
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

func pemOf(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// TestJobIsStripped: the check's pod runs without privileges, and secret
// endpoint values reach it by reference only.
func TestJobIsStripped(t *testing.T) {
	secret := &primazav1alpha1.SecretKeyRef{Name: "db", Key: "password"}
	svc := &primazav1alpha1.RegisteredService{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("long-name-", 8), Namespace: "ns", UID: "u-1"},
		Spec: primazav1alpha1.RegisteredServiceSpec{
			ServiceEndpointDefinition: []primazav1alpha1.ServiceEndpointDefinitionItem{
				{Name: "host", Value: ptr.To("db")}, {Name: "pass-word", ValueFromSecret: secret},
			},
			HealthCheck: &primazav1alpha1.HealthCheck{Container: &primazav1alpha1.HealthCheckContainer{
				Image: "alpine", Command: []string{"true"}, EndpointEnv: true, TimeoutSeconds: 30,
			}},
		},
	}
	job := Job(svc, time.Unix(1700000000, 0))
	assert.LessOrEqual(t, len(job.Name), 63)
	assert.True(t, strings.HasSuffix(job.Name, "-hc-1700000000"), job.Name)
	assert.Equal(t, int64(30), *job.Spec.ActiveDeadlineSeconds)
	pod := job.Spec.Template.Spec
	assert.False(t, *pod.AutomountServiceAccountToken)
	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	c := pod.Containers[0].SecurityContext
	assert.True(t, *c.ReadOnlyRootFilesystem)
	assert.False(t, *c.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.Capabilities.Drop)
	assert.False(t, pod.Containers[0].Resources.Limits.Cpu().IsZero())
	assert.Equal(t, []corev1.EnvVar{
		{Name: "ENDPOINT_HOST", Value: "db"},
		{Name: "ENDPOINT_PASS_WORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
	}, pod.Containers[0].Env)
	assert.Equal(t, "u-1", job.Labels[LabelService])
	assert.Equal(t, "u-1", job.Spec.Template.Labels[LabelService])
}

// TestJobResult reads a check from its Job and pods.
func TestJobResult(t *testing.T) {
	cond := func(typ batchv1.JobConditionType, reason string) *batchv1.Job {
		return &batchv1.Job{Spec: batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](60)},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: typ, Status: corev1.ConditionTrue, Reason: reason}}}}
	}
	exited := corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Message: "no answer"}}}}}}
	waiting := corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"}}}}}}
	unschedulable := corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes"}}}}
	for _, tc := range []struct {
		name    string
		job     *batchv1.Job
		pods    []corev1.Pod
		want    primazav1alpha1.CheckResult
		message string
		done    bool
	}{
		{"complete", cond(batchv1.JobComplete, ""), nil, primazav1alpha1.CheckSucceeded, "exited 0", true},
		{"failed", cond(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded), []corev1.Pod{exited}, primazav1alpha1.CheckFailed, "exited 3: no answer", true},
		{"out of time", cond(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded), nil, primazav1alpha1.CheckUnknown, "ran out of its 60 s", true},
		{"image", &batchv1.Job{}, []corev1.Pod{waiting}, primazav1alpha1.CheckUnknown, "ImagePullBackOff: not found", true},
		{"unschedulable", &batchv1.Job{}, []corev1.Pod{unschedulable}, primazav1alpha1.CheckUnknown, "cannot be scheduled: 0/3 nodes", true},
		{"running", &batchv1.Job{}, []corev1.Pod{{}}, "", "", false},
	} {
		r, done := JobResult(tc.job, tc.pods)
		assert.Equal(t, tc.done, done, tc.name)
		assert.Equal(t, tc.want, r.Outcome, tc.name)
		assert.Contains(t, r.Message, tc.message, tc.name)
	}
}

// TestJobDuration: a check's time is its Job's, start to end.
func TestJobDuration(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(start.Add(d)); return &t }
	for _, tc := range []struct {
		name   string
		status batchv1.JobStatus
		want   time.Duration
	}{
		{"completed", batchv1.JobStatus{StartTime: &start, CompletionTime: at(3 * time.Second)}, 3 * time.Second},
		{"failed", batchv1.JobStatus{StartTime: &start, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: *at(7 * time.Second)}}}, 7 * time.Second},
		{"never started", batchv1.JobStatus{CompletionTime: at(time.Second)}, 0},
		{"not ended", batchv1.JobStatus{StartTime: &start}, 0},
	} {
		assert.Equal(t, tc.want, JobDuration(&batchv1.Job{Status: tc.status}), tc.name)
	}
}
