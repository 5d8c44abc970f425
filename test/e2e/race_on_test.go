//go:build race

package e2e

// raceEnabled: the tests run with the race detector.
const raceEnabled = true
