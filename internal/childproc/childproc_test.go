package childproc_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/childproc"
)

// TestCleanup kills what a pid file names only while that process still
// runs the binary it was recorded for: a reused pid is left alone.
func TestCleanup(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	sleep, err = filepath.EvalSymlinks(sleep)
	require.NoError(t, err)
	binDir, pids := filepath.Dir(sleep), t.TempDir()

	left := exec.Command(sleep, "60")
	require.NoError(t, left.Start())
	other := exec.Command(sleep, "60")
	require.NoError(t, other.Start())
	defer other.Process.Kill()
	write := func(name string, pid int) {
		require.NoError(t, os.WriteFile(filepath.Join(pids, name+".pid"), []byte(strconv.Itoa(pid)), 0o644))
	}
	write(filepath.Base(sleep), left.Process.Pid)
	write("etcd", other.Process.Pid) // the pid now runs something else

	killed, err := childproc.Cleanup(pids, binDir)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Base(sleep) + " (pid " + strconv.Itoa(left.Process.Pid) + ")"}, killed)
	require.Error(t, left.Wait(), "the leftover was killed")
	_, running := childproc.Running(filepath.Join(pids, "etcd.pid"))
	assert.False(t, running, "its pid file is gone")
	require.NoError(t, syscall.Kill(other.Process.Pid, 0), "the other process lives")
}

// TestCleanupThroughASymlinkedBinDir: a bin directory reached through a
// symbolic link (a clone whose bin/ leads to another's) still names the
// leftover's binary, which the kernel knows by its resolved path.
func TestCleanupThroughASymlinkedBinDir(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	sleep, err = filepath.EvalSymlinks(sleep)
	require.NoError(t, err)
	linked := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.Symlink(filepath.Dir(sleep), linked))
	pids := t.TempDir()

	left := exec.Command(filepath.Join(linked, filepath.Base(sleep)), "60")
	require.NoError(t, left.Start())
	defer left.Process.Kill()
	require.NoError(t, os.WriteFile(filepath.Join(pids, filepath.Base(sleep)+".pid"), []byte(strconv.Itoa(left.Process.Pid)), 0o644))

	killed, err := childproc.Cleanup(pids, linked)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Base(sleep) + " (pid " + strconv.Itoa(left.Process.Pid) + ")"}, killed)
	require.Error(t, left.Wait(), "the leftover was killed")
}

// TestLinksNeedRun: links without Run wired into main would start the
// program itself instead of the server; Links refuses.
func TestLinksNeedRun(t *testing.T) {
	_, err := childproc.Links(t.TempDir(), "/usr/bin", t.TempDir(), nil, "etcd")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "childproc.Run must be called first")
}

func TestTailKeepsTheOutputsEnd(t *testing.T) {
	long := strings.Repeat("x", childproc.TailSize) + "the last line"
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"nothing printed", nil, ""},
		{"blank output", []string{"\n", "  \n"}, ""},
		{"short output, whole", []string{"listening\n", "address already in use\n"}, "\n--- the end of etcd's output:\nlistening\naddress already in use"},
		{"long output, its end", []string{long}, "\n--- the end of etcd's output:\n" + long[len(long)-childproc.TailSize:]},
		{"many writes, the end of the last ones", []string{long[:100], long[100:]}, "\n--- the end of etcd's output:\n" + long[len(long)-childproc.TailSize:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tail childproc.Tail
			for _, w := range tc.writes {
				n, err := tail.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			assert.Equal(t, tc.want, tail.Quote("etcd"))
		})
	}
}
