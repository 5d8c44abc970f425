package fairness_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/workqueue"

	"github.com/quartermaster/qm/internal/fairness"
)

// byPrefix is the tenant of items named "tenant/n".
func byPrefix(item string) string { return item[:strings.IndexByte(item, '/')] }

// step is a Push of its items, then Pops of as many as pops says.
type step struct {
	push []string
	pops int
}

func TestQueueTakesTenantsInTurn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		want  []string
	}{
		{
			name:  "one tenant: first come, first served",
			steps: []step{{push: []string{"a/1", "a/2", "a/3"}, pops: 3}},
			want:  []string{"a/1", "a/2", "a/3"},
		},
		{
			name:  "a burst, then another tenant's one item: served second, not last",
			steps: []step{{push: []string{"a/1", "a/2", "a/3", "a/4", "b/1"}, pops: 5}},
			want:  []string{"a/1", "b/1", "a/2", "a/3", "a/4"},
		},
		{
			name: "a tenant that arrives mid-burst waits one turn of each tenant there",
			steps: []step{
				{push: []string{"a/1", "a/2", "a/3", "b/1", "b/2"}, pops: 1},
				{push: []string{"c/1"}, pops: 5},
			},
			want: []string{"a/1", "b/1", "a/2", "c/1", "b/2", "a/3"},
		},
		{
			name: "a tenant whose line emptied joins again at the back",
			steps: []step{
				{push: []string{"a/1", "a/2", "b/1"}, pops: 2},
				{push: []string{"b/2", "c/1"}, pops: 3},
			},
			want: []string{"a/1", "b/1", "a/2", "b/2", "c/1"},
		},
		{
			name: "emptied, then refilled",
			steps: []step{
				{push: []string{"a/1"}, pops: 1},
				{push: []string{"b/1", "a/2"}, pops: 2},
			},
			want: []string{"a/1", "b/1", "a/2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := fairness.NewQueue(byPrefix)
			var got []string
			for _, s := range tc.steps {
				for _, item := range s.push {
					q.Push(item)
				}
				for range s.pops {
					got = append(got, q.Pop())
				}
			}
			assert.Equal(t, tc.want, got)
			assert.Zero(t, q.Len(), "nothing left")
		})
	}
}

// The workqueue keeps its guarantees over the order: an item added again
// while it waits is queued once, and one added while a worker has it comes
// back after Done.
func TestQueueUnderTheWorkqueue(t *testing.T) {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Queue: fairness.NewQueue(byPrefix)})
	defer q.ShutDown()
	for _, item := range []string{"a/1", "a/2", "a/1", "a/3", "b/1"} {
		q.Add(item)
	}
	require.Equal(t, 4, q.Len(), "a/1 is queued once")

	first, _ := q.Get()
	assert.Equal(t, "a/1", first)
	q.Add("a/1") // changed again while a worker has it
	second, _ := q.Get()
	assert.Equal(t, "b/1", second, "the other tenant's item is next")
	q.Done(first)
	q.Done(second)

	var rest []string
	for q.Len() > 0 {
		item, _ := q.Get()
		rest = append(rest, item)
		q.Done(item)
	}
	assert.Equal(t, []string{"a/2", "a/3", "a/1"}, rest, "a/1 comes back after Done, behind its tenant's line")
}
