package bindingusage

import (
	"encoding/json"
	"fmt"
	"strings"
)

// RolloutManager is the field manager of the one patch that rolls a
// workload when credentials change: it writes the new digests of every
// projection into the workload whose Secret changed, so that Secrets
// changing together roll the workload once. Each usage's own apply cannot
// do that: a server-side apply writes only its own manager's fields.
const RolloutManager = "qm-rollout"

// hashKeyPrefix begins every HashKey.
const hashKeyPrefix = "binding-hash.quartermaster.io/"

// HashKeyUsage is the usage (or "sb-" and a ServiceBinding's name) that a
// pod annotation's key is the HashKey of; false for any other key.
func HashKeyUsage(key string) (string, bool) {
	usage, ok := strings.CutPrefix(key, hashKeyPrefix)
	if !ok || usage == "" {
		return "", false
	}
	return usage, true
}

// DropField removes the field key (an annotation's or label's key) from
// a managed fields entry's FieldsV1 set, wherever it is, and the sets it
// leaves empty. It says whether it was there, and whether nothing is left.
func DropField(fieldsV1 []byte, key string) (out []byte, dropped, empty bool, err error) {
	var set map[string]any
	if err := json.Unmarshal(fieldsV1, &set); err != nil {
		return nil, false, false, fmt.Errorf("reading a managed fields set: %w", err)
	}
	dropped = drop(set, "f:"+key)
	if !dropped {
		return fieldsV1, false, len(set) == 0, nil
	}
	out, err = json.Marshal(set)
	return out, true, len(set) == 0, err
}

// drop removes field from set and below it, then the sets that held only
// what it removed. A set that is empty to begin with (a field owned as a
// whole, "f:x": {}) is a leaf and stays.
func drop(set map[string]any, field string) bool {
	dropped := false
	if _, ok := set[field]; ok {
		delete(set, field)
		dropped = true
	}
	for k, v := range set {
		child, ok := v.(map[string]any)
		if !ok || len(child) == 0 {
			continue
		}
		if drop(child, field) {
			dropped = true
			if len(child) == 0 {
				delete(set, k)
			}
		}
	}
	return dropped
}
