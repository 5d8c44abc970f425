// Command testlint checks the tests as `make test` runs them: testifylint
// with its default checkers, and testhandle (no test handle off the test
// goroutine), in one load of the packages.
package main

import (
	"github.com/Antonboom/testifylint/analyzer"
	"golang.org/x/tools/go/analysis/multichecker"

	"github.com/quartermaster/qm/hack/testlint/testhandle"
)

func main() {
	multichecker.Main(analyzer.New(), testhandle.Analyzer)
}
