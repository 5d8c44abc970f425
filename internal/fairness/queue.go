package fairness

// Queue is the order of a watcher's reconcile queue: each tenant with work
// waiting gets a turn in a ring, one item a turn, so that a burst of a
// thousand events in one tenant puts one item, not a thousand, before
// another tenant's next. Within a tenant the order stays first come, first
// served. Weights (tiers) are left to Temporal: a reconcile only starts or
// signals a run, which is quick; the work it starts is what weights share.
//
// It is client-go's workqueue.Queue: the workqueue keeps its own
// guarantees (an item is never queued twice, nor handed to two workers at
// once) and calls Queue under its lock, so Queue has none of its own.
type Queue[T comparable] struct {
	tenant  func(T) string
	waiting map[string][]T
	// turns holds the tenants with items waiting, in turn order; next is
	// the index of the one whose turn it is.
	turns []string
	next  int
	len   int
}

// NewQueue returns an empty Queue ordering items by tenant(item).
func NewQueue[T comparable](tenant func(T) string) *Queue[T] {
	return &Queue[T]{tenant: tenant, waiting: map[string][]T{}}
}

// Touch is called for an item added again while it waits: it keeps its
// place.
func (q *Queue[T]) Touch(T) {}

// Push queues an item at the end of its tenant's line; a tenant that had
// nothing waiting joins the ring just before the one whose turn it is, so
// it waits at most one turn of each tenant already there.
func (q *Queue[T]) Push(item T) {
	key := q.tenant(item)
	line, ok := q.waiting[key]
	if !ok {
		q.turns = insertAt(q.turns, q.next, key)
		q.next++
		if q.next == len(q.turns) {
			q.next = 0
		}
	}
	q.waiting[key] = append(line, item)
	q.len++
}

// Len is the number of items waiting.
func (q *Queue[T]) Len() int { return q.len }

// Pop takes the first item of the tenant whose turn it is. The workqueue
// calls it only when Len is positive.
func (q *Queue[T]) Pop() T {
	key := q.turns[q.next]
	line := q.waiting[key]
	item := line[0]
	var zero T
	line[0] = zero // let the item go once it is processed
	q.len--
	if len(line) == 1 {
		delete(q.waiting, key)
		q.turns = append(q.turns[:q.next], q.turns[q.next+1:]...)
	} else {
		q.waiting[key] = line[1:]
		q.next++
	}
	if q.next >= len(q.turns) {
		q.next = 0
	}
	return item
}

func insertAt(s []string, i int, v string) []string {
	s = append(s, "")
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
