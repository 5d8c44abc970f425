package runs

import "go.temporal.io/sdk/temporal"

// Search attributes that make Quartermaster's workflows findable in the
// Temporal UI, e.g. `QmKind="SFServiceInstance" AND Operation="provision"`.
// All are keywords: SQLite visibility has ten keyword slots, and these use
// all ten. They carry identities and states only, never credentials or
// parameters.
var (
	AttrKind      = temporal.NewSearchAttributeKeyKeyword("QmKind")
	AttrNamespace = temporal.NewSearchAttributeKeyKeyword("QmNamespace")
	AttrName      = temporal.NewSearchAttributeKeyKeyword("QmName")
	AttrInstance  = temporal.NewSearchAttributeKeyKeyword("InstanceID")
	AttrBinding   = temporal.NewSearchAttributeKeyKeyword("BindingID")
	AttrService   = temporal.NewSearchAttributeKeyKeyword("ServiceID")
	AttrPlan      = temporal.NewSearchAttributeKeyKeyword("PlanID")
	AttrCluster   = temporal.NewSearchAttributeKeyKeyword("ClusterID")
	AttrOperation = temporal.NewSearchAttributeKeyKeyword("Operation")
	// AttrState is the state an operation ended in (succeeded or failed),
	// set when its run ends: `QmState="failed"` lists the failures.
	AttrState = temporal.NewSearchAttributeKeyKeyword("QmState")
)

// SearchAttributeKeys lists every search attribute the workflows set; a
// Temporal namespace must have them registered before workflows start.
func SearchAttributeKeys() []temporal.SearchAttributeKeyKeyword {
	return []temporal.SearchAttributeKeyKeyword{
		AttrKind, AttrNamespace, AttrName, AttrInstance, AttrBinding,
		AttrService, AttrPlan, AttrCluster, AttrOperation, AttrState,
	}
}
