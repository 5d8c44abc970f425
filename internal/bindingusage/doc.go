// Package bindingusage is Kyma's binding injection as pure logic: how a
// UsageKind's paths are found in a workload, what a ServiceBindingUsage
// adds to it (environment variables through secretKeyRefs, a label, a hash
// annotation, optionally a servicebinding.io volume), and how that
// addition is named so that one field manager per usage owns exactly it.
// It also resolves a UsageKind's resource through discovery and asks the
// API server whether an identity may work on it. It has no Temporal in it.
package bindingusage
