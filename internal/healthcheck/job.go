package healthcheck

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// LabelService marks a check's Job and pod with the UID of its service.
const LabelService = "healthcheck.quartermaster.io/service-uid"

// finishedJobTTL removes a finished Job that the loop did not: the loop
// deletes the Jobs it has read.
const finishedJobTTL = 600

// waitingReasons are the reasons a container waits that mean the check
// cannot start by itself.
var waitingReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true,
}

// Job is the Job that runs the container check of svc due at due.
func Job(svc *primazav1alpha1.RegisteredService, due time.Time) *batchv1.Job {
	c := Of(svc).Container
	labels := map[string]string{LabelService: string(svc.UID), "app.kubernetes.io/managed-by": "quartermaster"}
	timeout := int64(max(c.TimeoutSeconds, 1))
	if c.TimeoutSeconds == 0 {
		timeout = 60
	}
	container := corev1.Container{
		Name:    "check",
		Image:   c.Image,
		Command: c.Command,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
	}
	if c.EndpointEnv {
		container.Env = EndpointEnv(svc)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      JobName(svc.Name, due),
			Namespace: svc.Namespace,
			Labels:    labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: primazav1alpha1.GroupVersion.String(), Kind: "RegisteredService",
				Name: svc.Name, UID: svc.UID,
			}},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   &timeout,
			TTLSecondsAfterFinished: ptr.To[int32](finishedJobTTL),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](65532),
						RunAsGroup:     ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{container},
				},
			},
		},
	}
}

// JobName is the name of the check of service name due at due: one name
// per due check, so that creating it twice creates one Job.
func JobName(name string, due time.Time) string {
	if len(name) > 40 {
		h := fnv.New32a()
		h.Write([]byte(name))
		name = fmt.Sprintf("%s-%08x", strings.TrimRight(name[:31], "-."), h.Sum32())
	}
	return name + "-hc-" + strconv.FormatInt(due.Unix(), 10)
}

var notEnvChars = regexp.MustCompile(`[^A-Za-z0-9_]`)

// EndpointEnv is svc's endpoint definition as ENDPOINT_<NAME> variables,
// secret values by reference, so that they never sit in the Job.
func EndpointEnv(svc *primazav1alpha1.RegisteredService) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(svc.Spec.ServiceEndpointDefinition))
	for _, item := range svc.Spec.ServiceEndpointDefinition {
		v := corev1.EnvVar{Name: "ENDPOINT_" + strings.ToUpper(notEnvChars.ReplaceAllString(item.Name, "_"))}
		if item.ValueFromSecret != nil {
			v.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: item.ValueFromSecret.Name},
				Key:                  item.ValueFromSecret.Key,
			}}
		} else if item.Value != nil {
			v.Value = *item.Value
		}
		env = append(env, v)
	}
	return env
}

// JobResult is what a check's Job and its pods tell so far; done is false
// while the check runs. A Job that ran out of time, or whose pod cannot be
// scheduled or cannot start its container, tells nothing of the service:
// CheckUnknown, with the reason.
func JobResult(job *batchv1.Job, pods []corev1.Pod) (r Result, done bool) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch {
		case c.Type == batchv1.JobComplete:
			return Result{Outcome: primazav1alpha1.CheckSucceeded, Message: "the check's container exited 0"}, true
		case c.Type == batchv1.JobFailed && c.Reason == batchv1.JobReasonDeadlineExceeded:
			return Result{Outcome: primazav1alpha1.CheckUnknown,
				Message: fmt.Sprintf("the check ran out of its %d s", ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0))}, true
		case c.Type == batchv1.JobFailed:
			return Result{Outcome: primazav1alpha1.CheckFailed, Message: exitMessage(pods)}, true
		}
	}
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return Result{Outcome: primazav1alpha1.CheckUnknown, Message: "the check's pod cannot be scheduled: " + c.Message}, true
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && waitingReasons[w.Reason] {
				return Result{Outcome: primazav1alpha1.CheckUnknown, Message: fmt.Sprintf("the check could not start: %s: %s", w.Reason, w.Message)}, true
			}
		}
	}
	return Result{}, false
}

// JobDuration is how long an ended check's Job ran, from its start to its
// completion or failure; 0 when the Job does not say.
func JobDuration(job *batchv1.Job) time.Duration {
	if job.Status.StartTime == nil {
		return 0
	}
	end := job.Status.CompletionTime
	for _, c := range job.Status.Conditions {
		if end == nil && c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			end = &c.LastTransitionTime
		}
	}
	if end == nil || end.Before(job.Status.StartTime) {
		return 0
	}
	return end.Sub(job.Status.StartTime.Time)
}

// exitMessage says how the check's container ended.
func exitMessage(pods []corev1.Pod) string {
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				msg := fmt.Sprintf("the check's container exited %d", t.ExitCode)
				if t.Message != "" {
					msg += ": " + t.Message
				}
				return msg
			}
		}
	}
	return "the check's Job failed"
}
