// Package limits decides whether a new instance fits under the limits an
// operator set: its plan's maxInstances, its OSB organization's, its
// namespace's (docs/fairness.md).
//
// Every instance counts until it is deleted, whatever its state, as a
// platform's quota and Kubernetes' ResourceQuota count them: a failed
// provision is still an instance someone has to deprovision. A recorded
// instance is checked against the others it sees recorded, so that a limit
// is never passed: of two instances checked at once, each sees the other,
// and when only one place was left both are refused.
package limits

import "fmt"

// Limit is a maximum number of instances, and what it is the limit of, as
// a refusal names it: `plan "small"`, `organization "9b2c"`.
type Limit struct {
	Of  string
	Max int
}

// Instance is what deciding needs of an instance that counts.
type Instance struct {
	Namespace, Name string
	// Deleting instances no longer count: their removal is under way.
	Deleting bool
}

// Exceeded is the refusal of an instance beyond a limit.
type Exceeded struct {
	Limit Limit
	// Count is how many instances held the limit when it was checked.
	Count int
}

func (e *Exceeded) Error() string {
	return fmt.Sprintf("%s allows at most %s, and %s: deprovision one, or ask the operator for a higher limit",
		e.Limit.Of, instances(e.Limit.Max), exist(e.Count))
}

func instances(n int) string {
	if n == 1 {
		return "1 instance"
	}
	return fmt.Sprintf("%d instances", n)
}

func exist(n int) string {
	if n == 1 {
		return "1 exists"
	}
	return fmt.Sprintf("%d exist", n)
}

// Admit checks a new instance, not yet recorded, against l when count
// instances already hold it. A Max of 0 or less is no limit.
func Admit(l Limit, count int) error {
	if l.Max <= 0 || count < l.Max {
		return nil
	}
	return &Exceeded{Limit: l, Count: count}
}

// Place checks the recorded instance me against l, among all the
// instances l counts (me among them): it fits when fewer than l.Max
// others are there and not being deleted.
func Place(l Limit, all []Instance, me Instance) error {
	others := 0
	for _, i := range all {
		if !i.Deleting && (i.Namespace != me.Namespace || i.Name != me.Name) {
			others++
		}
	}
	return Admit(l, others)
}
