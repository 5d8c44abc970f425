package testenv

import (
	"errors"
	"fmt"
	"os"
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
	haveCommit(t, ref)
	out, err := exec.Command("git", "-C", RepoDir(), "show", ref+":"+path).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("%w: %s", err, exit.Stderr)
	}
	require.NoError(t, err, "git show %s:%s (the tests need the repository's history)", ref, path)
	return out
}

// ExistsAtCommit says whether path was a file of the repository at ref:
// a kind added since has no definition in an earlier release.
func ExistsAtCommit(t testing.TB, ref, path string) bool {
	t.Helper()
	haveCommit(t, ref)
	return exec.Command("git", "-C", RepoDir(), "cat-file", "-e", ref+":"+path).Run() == nil
}

// BuildRelease builds qm as it was at ref, a commit of the repository's
// history, into the test's own directory, and returns the binary's path:
// an earlier release, to run beside this one. The source is a git worktree
// of ref, removed when the test ends; the build shares the module and
// build caches, so only what changed since is compiled.
func BuildRelease(t testing.TB, ref string) string {
	t.Helper()
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "src"), filepath.Join(dir, "qm")
	git := func(args ...string) {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", RepoDir()}, args...)...).CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	haveCommit(t, ref)
	git("worktree", "prune")
	git("worktree", "add", "--detach", src, ref)
	t.Cleanup(func() { git("worktree", "remove", "--force", src) })
	build := exec.Command("go", "build", "-o", bin, "-ldflags",
		"-X github.com/quartermaster/qm/internal/cli.version="+ref+" -X github.com/quartermaster/qm/internal/cli.revision="+ref, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building qm at %s: %s", ref, out)
	return bin
}

// ReleaseSource is the source tree of the release BuildRelease built into
// bin: its git worktree, removed when the test ends (the earlier
// release's chart is there, for one).
func ReleaseSource(bin string) string { return filepath.Join(filepath.Dir(bin), "src") }

// haveCommit makes sure the repository has the commit ref, fetching the
// whole history from its origin when it has not (a shallow clone).
func haveCommit(t testing.TB, ref string) {
	t.Helper()
	if exec.Command("git", "-C", RepoDir(), "cat-file", "-e", ref+"^{commit}").Run() == nil {
		return
	}
	out, err := exec.Command("git", "-C", RepoDir(), "fetch", "--quiet", "--unshallow", "origin").CombinedOutput()
	require.NoError(t, err, "commit %s is not in this clone, and fetching the history from its origin failed: %s", ref, out)
}
