package bindingusage

import (
	"testing"

	"github.com/stretchr/testify/assert"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

func TestClaimIdentity(t *testing.T) {
	for _, c := range []struct {
		name               string
		ids                []primazav1alpha1.ServiceClassIdentityItem
		wantType, wantProv string
	}{
		{"none", nil, "", ""},
		{"both", []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "postgresql"}, {Name: "provider", Value: "aws"}}, "postgresql", "aws"},
		{"others ignored", []primazav1alpha1.ServiceClassIdentityItem{{Name: "version", Value: "16"}, {Name: "type", Value: "redis"}}, "redis", ""},
		{"provider only", []primazav1alpha1.ServiceClassIdentityItem{{Name: "provider", Value: "bitnami"}}, "", "bitnami"},
	} {
		t.Run(c.name, func(t *testing.T) {
			typ, provider := ClaimIdentity(c.ids)
			assert.Equal(t, c.wantType, typ)
			assert.Equal(t, c.wantProv, provider)
		})
	}
}
