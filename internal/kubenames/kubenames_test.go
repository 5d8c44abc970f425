package kubenames_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/quartermaster/qm/internal/kubenames"
)

func TestBounded(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tc := range []struct {
		name, prefix, in, want string
	}{
		{"short: kept", "qm-instance-", "db", "qm-instance-db"},
		{"at the bound: kept", "", strings.Repeat("b", 253), strings.Repeat("b", 253)},
		{"past it: hashed", "qm-instance-", long, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := kubenames.Bounded(tc.prefix, tc.in)
			assert.LessOrEqual(t, len(got), 253)
			if tc.want == "" {
				assert.True(t, strings.HasPrefix(got, tc.prefix))
				assert.Len(t, got, len(tc.prefix)+64)
				assert.Equal(t, got, kubenames.Bounded(tc.prefix, tc.in), "the same name, the same result")
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		kept      bool
		wantStart string
	}{
		{"a short name", "db-1", true, ""},
		{"63 characters", strings.Repeat("a", 63), true, ""},
		{"64 characters", strings.Repeat("a", 64), false, strings.Repeat("a", 42) + "-"},
		{"253 characters with dots", strings.Repeat("a.", 126) + "a", false, strings.Repeat("a.", 21) + "-"},
		{"a leading dot after the cut", "." + strings.Repeat("x", 70), false, strings.Repeat("x", 41) + "-"},
		{"nothing label-like", strings.Repeat("ü", 40), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := kubenames.LabelValue(tc.in)
			assert.Empty(t, validation.IsValidLabelValue(got), "a valid label value: %q", got)
			if tc.kept {
				assert.Equal(t, tc.in, got)
				return
			}
			assert.NotEqual(t, tc.in, got)
			assert.True(t, strings.HasPrefix(got, tc.wantStart), "%q starts with %q", got, tc.wantStart)
			assert.Equal(t, got, kubenames.LabelValue(tc.in), "the same name, the same value")
			assert.NotEqual(t, got, kubenames.LabelValue(tc.in+"b"), "another name, another value")
		})
	}
}

func TestSetLabelAndNameOf(t *testing.T) {
	const key = "quartermaster.io/binding"
	long := strings.Repeat("n", 100)
	for _, tc := range []struct {
		name, in       string
		wantAnnotation bool
	}{
		{"a short name is its own value", "app", false},
		{"a long one is hashed and kept aside", long, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{}
			kubenames.SetLabel(obj, key, tc.in)
			assert.Equal(t, kubenames.LabelValue(tc.in), obj.Labels[key])
			_, has := obj.Annotations[key]
			assert.Equal(t, tc.wantAnnotation, has)
			assert.Equal(t, tc.in, kubenames.NameOf(obj, key))
		})
	}

	t.Run("relabelled short, the annotation goes", func(t *testing.T) {
		obj := &metav1.ObjectMeta{}
		kubenames.SetLabel(obj, key, long)
		kubenames.SetLabel(obj, key, "app")
		assert.NotContains(t, obj.Annotations, key)
		assert.Equal(t, "app", kubenames.NameOf(obj, key))
	})
	t.Run("an annotation that does not give the label is not believed", func(t *testing.T) {
		obj := &metav1.ObjectMeta{Labels: map[string]string{key: "app"}, Annotations: map[string]string{key: "someone-else"}}
		assert.Equal(t, "app", kubenames.NameOf(obj, key))
	})
	t.Run("no label, no name", func(t *testing.T) {
		assert.Empty(t, kubenames.NameOf(&metav1.ObjectMeta{}, key))
	})
}
