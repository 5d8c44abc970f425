package workflows

// MassStartsPerRun lets a test continue a mass update as new early.
var MassStartsPerRun = &massStartsPerRun
