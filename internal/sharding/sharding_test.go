package sharding_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/sharding"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		text    string
		want    sharding.Shard
		wantErr string
	}{
		{text: "", want: sharding.Whole},
		{text: "0/1", want: sharding.Whole},
		{text: "2/3", want: sharding.Shard{Index: 2, Count: 3}},
		{text: "3/3", wantErr: "the shard must be 0 to 2"},
		{text: "-1/3", wantErr: "the shard must be 0 to 2"},
		{text: "0/0", wantErr: "the number of shards must be 1 to 64"},
		{text: "0/65", wantErr: "the number of shards must be 1 to 64"},
		{text: "1", wantErr: "want N/M"},
		{text: "a/b", wantErr: "want N/M"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			got, err := sharding.Parse(tc.text)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Every bucket belongs to exactly one shard, whatever their number, and
// the API server's selector says the same as Owns.
func TestEveryBucketHasOneShard(t *testing.T) {
	for count := 1; count <= 8; count++ {
		owners := make([]int, sharding.Buckets)
		for index := range count {
			s := sharding.Shard{Index: index, Count: count}
			sel := s.Selector()
			for b := range sharding.Buckets {
				set := labels.Set{sharding.Label: strconv.Itoa(b)}
				assert.Equal(t, s.Owns(b), sel.Matches(set), "shard %s, bucket %d", s, b)
				if s.Owns(b) {
					owners[b]++
				}
			}
		}
		for b, n := range owners {
			assert.Equal(t, 1, n, "%d shards: bucket %d", count, b)
		}
	}
}

func TestOwnsObject(t *testing.T) {
	two := sharding.Shard{Index: 1, Count: 2}
	for _, tc := range []struct {
		name  string
		label *string
		whole bool // the whole owns it
		owned bool // shard 1/2 owns it
		stamp bool // Unstamped selects it
	}{
		{name: "odd bucket", label: new("5"), whole: true, owned: true},
		{name: "even bucket", label: new("4"), whole: true},
		{name: "no label", whole: true, stamp: true},
		{name: "not a number", label: new("five"), whole: true, stamp: true},
		{name: "out of range", label: new("64"), whole: true, stamp: true},
		{name: "leading zero", label: new("05"), whole: true, stamp: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &corev1.ConfigMap{}
			if tc.label != nil {
				obj.Labels = map[string]string{sharding.Label: *tc.label}
			}
			assert.Equal(t, tc.whole, sharding.Whole.OwnsObject(obj))
			assert.Equal(t, tc.owned, two.OwnsObject(obj))
			assert.Equal(t, tc.stamp, sharding.Unstamped().Matches(labels.Set(obj.Labels)))
		})
	}
}

// An instance and its bindings fall into one bucket; a second stamp
// changes nothing.
func TestStamp(t *testing.T) {
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Name: "i-1", Labels: map[string]string{"app": "x"}},
		Spec: osbv1alpha1.SFServiceInstanceSpec{InstanceID: "7d3c-instance"}}
	b := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: "b-1"},
		Spec: osbv1alpha1.SFServiceBindingSpec{InstanceID: "7d3c-instance"}}
	bare := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Name: "by-kubectl"}}

	require.True(t, sharding.Stamp(inst))
	require.True(t, sharding.Stamp(b))
	require.True(t, sharding.Stamp(bare))
	assert.False(t, sharding.Stamp(inst), "a second stamp changes nothing")
	assert.False(t, sharding.Stamp(&corev1.ConfigMap{}), "a kind that is not sharded")

	want := strconv.Itoa(sharding.Bucket("7d3c-instance"))
	assert.Equal(t, want, inst.Labels[sharding.Label])
	assert.Equal(t, want, b.Labels[sharding.Label], "a binding goes with its instance")
	assert.Equal(t, "x", inst.Labels["app"], "the other labels stay")
	assert.Equal(t, strconv.Itoa(sharding.Bucket("by-kubectl")), bare.Labels[sharding.Label], "an instance without an ID is keyed by its name")
}

// The keys spread over the buckets: no shard of three gets far more than
// its third of ten thousand instances.
func TestBucketsSpread(t *testing.T) {
	per := make([]int, 3)
	for i := range 10000 {
		b := sharding.Bucket("instance-" + strconv.Itoa(i))
		per[b%3]++
	}
	for shard, n := range per {
		assert.InDelta(t, 3333, n, 300, "shard %d", shard)
	}
}
