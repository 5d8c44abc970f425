package apply

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestWaves(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []string
		want  [][]int
	}{
		{name: "nothing", kinds: nil, want: nil},
		{name: "no ordered kind: one wave", kinds: []string{"ConfigMap", "Secret", "Role"}, want: [][]int{{0, 1, 2}}},
		{name: "a namespace before its contents", kinds: []string{"Namespace", "ConfigMap", "Secret"}, want: [][]int{{0}, {1, 2}}},
		{name: "the tenant-namespace sample: namespace, quota, then the rest",
			kinds: []string{"Namespace", "ResourceQuota", "Role", "RoleBinding", "Secret", "ConfigMap"},
			want:  [][]int{{0}, {1}, {2, 3, 4, 5}}},
		{name: "what comes before an ordered kind stays before it",
			kinds: []string{"ConfigMap", "ServiceAccount", "Deployment", "Service", "CustomResourceDefinition", "LimitRange", "Pod"},
			want:  [][]int{{0}, {1}, {2, 3}, {4}, {5}, {6}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := make([]*unstructured.Unstructured, len(tc.kinds))
			for i, kind := range tc.kinds {
				objs[i] = &unstructured.Unstructured{}
				objs[i].SetKind(kind)
			}
			assert.Equal(t, tc.want, waves(objs))
		})
	}
}
