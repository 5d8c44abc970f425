package scheduling_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/quartermaster/qm/internal/scheduling"
)

func TestAllocatable(t *testing.T) {
	nodes := []corev1.Node{
		{Status: corev1.NodeStatus{Allocatable: list("4", "8Gi")}},
		{Status: corev1.NodeStatus{Allocatable: list("2", "4Gi")}},
		{Spec: corev1.NodeSpec{Unschedulable: true}, Status: corev1.NodeStatus{Allocatable: list("16", "64Gi")}},
	}
	got := scheduling.Allocatable(nodes)
	assert.True(t, resource.MustParse("6").Equal(got[corev1.ResourceCPU]), "cpu %s", got.Cpu())
	assert.True(t, resource.MustParse("12Gi").Equal(got[corev1.ResourceMemory]), "memory %s", got.Memory())
}

func TestPodRequests(t *testing.T) {
	pod := func(phase corev1.PodPhase, cpu ...string) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		for _, c := range cpu {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: corev1.ResourceRequirements{Requests: list(c, "")}})
		}
		return p
	}
	got := scheduling.PodRequests([]corev1.Pod{
		pod(corev1.PodRunning, "500m", "250m"),
		pod(corev1.PodPending, "1"),
		pod(corev1.PodSucceeded, "8"), // ended: holds nothing
	})
	assert.True(t, resource.MustParse("1750m").Equal(got[corev1.ResourceCPU]), "cpu %s", got.Cpu())
	assert.EqualValues(t, 2, got.Pods().Value())
}

func TestDemand(t *testing.T) {
	for _, tc := range []struct {
		name, context string
		want          corev1.ResourceList
		err           string
	}{
		{"none", ``, nil, ""},
		{"no requests", `{"other": 1}`, corev1.ResourceList{}, ""},
		{"quantities as strings and numbers", `{"requests": {"cpu": "500m", "memory": "1Gi", "pods": 2}}`,
			corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("1Gi"), "pods": resource.MustParse("2")}, ""},
		{"not a quantity", `{"requests": {"cpu": "lots"}}`, nil, `the plan's context.requests.cpu "lots" is not a quantity`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ctx *apiextensionsv1.JSON
			if tc.context != "" {
				ctx = &apiextensionsv1.JSON{Raw: []byte(tc.context)}
			}
			got, err := scheduling.Demand(ctx)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for name, q := range tc.want {
				assert.True(t, q.Equal(got[name]), "%s: %s, want %s", name, got[name], q)
			}
		})
	}
}
