// Package e2e holds the process-level suites: Quartermaster run as
// separate qm processes built once for all of them (buildQM), on a control
// plane and a Temporal dev server of their own, and hurt as a user's
// cluster would be. TestChaos is the chaos run (make chaos runs it long;
// make test, short), TestHighAvailability the replicas' hand-over, and
// TestDevSurvivesItsChildrenAndItself `qm dev`'s supervisor. They judge
// only from outside: resources, OSB replies, Temporal's visibility and
// histories, the processes' logs.
package e2e
