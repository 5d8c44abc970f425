package workflows_test

import (
	"testing"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestMain lets BenchmarkTemporalFloor start its dev server through the
// test binary (internal/childproc), so that the server dies with it.
func TestMain(m *testing.M) { testenv.Main(m) }
