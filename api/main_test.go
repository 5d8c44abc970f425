package api_test

import (
	"encoding/base64"
	"testing"

	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// identity is an X-Broker-API-Originating-Identity header.
func identity(platform, value string) string {
	return platform + " " + base64.StdEncoding.EncodeToString([]byte(value))
}
