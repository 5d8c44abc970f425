package api

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ResourceName is the name of the SFServiceInstance or SFServiceBinding that
// records an OSB instance_id or binding_id: the ID itself when it is a valid
// Kubernetes name, otherwise its SHA-224 sum in hex, as the Service Fabrik
// broker does. The same ID always gives the same name; the ID itself is kept
// in the resource's spec.
func ResourceName(id string) string {
	if len(validation.IsDNS1123Subdomain(id)) == 0 {
		return id
	}
	sum := sha256.Sum224([]byte(id))
	return hex.EncodeToString(sum[:])
}
