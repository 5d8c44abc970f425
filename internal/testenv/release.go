package testenv

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// RepoDir is the repository's top directory.
func RepoDir() string { return filepath.Dir(BinDir()) }

// AtCommit is the file at path (from the repository's top) as it was at
// ref, a commit of the repository's history: what an earlier release
// shipped.
func AtCommit(t testing.TB, ref, path string) []byte {
	t.Helper()
	out, err := exec.Command("git", "-C", RepoDir(), "show", ref+":"+path).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("%w: %s", err, exit.Stderr)
	}
	require.NoError(t, err, "git show %s:%s (the tests need the repository's history)", ref, path)
	return out
}
