//go:build race

package main

// raceEnabled: the tests run with the race detector.
const raceEnabled = true
