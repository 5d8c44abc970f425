package testhandle_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/quartermaster/qm/hack/testlint/testhandle"
)

// The cases in testdata say what is reported (`// want`) and what is not.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), testhandle.Analyzer, "a", "example.com/testenv")
}
