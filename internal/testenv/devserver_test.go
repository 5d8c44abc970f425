package testenv

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/devserver"
)

// The servers start through the test binary (internal/childproc).
func TestMain(m *testing.M) { Main(m) }

// TestDevServerWhosePortIsTakenIsStartedAgain: a dev server whose port is
// taken as it starts is started again, and after the last attempt the
// error says so and quotes the server.
func TestDevServerWhosePortIsTakenIsStartedAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = startDevServer(ctx, devserver.Options{Path: requireTool(t, "temporal"), Address: ln.Addr().String(), RunDir: t.TempDir()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited as it started")
	assert.Contains(t, err.Error(), "address already in use", "the server's own words")
	assert.Contains(t, err.Error(), "a port taken as it started, 3 times")
}

func TestSyncBufferKeepsItsMax(t *testing.T) {
	h := &SyncBuffer{Max: 5}
	for _, s := range []string{"abc", "defg", "hij"} {
		n, err := h.Write([]byte(s))
		require.NoError(t, err)
		assert.Equal(t, len(s), n, "every write is taken")
	}
	assert.Equal(t, "abcde", h.String())
}

func TestSyncBufferWithTailKeepsTheEnd(t *testing.T) {
	for name, tc := range map[string]struct {
		writes []string
		want   string
	}{
		"less than its max":  {[]string{"ab", "cd"}, "abcd"},
		"exactly its max":    {[]string{"abc", "def"}, "abcdef"},
		"past its max":       {[]string{"abcd", "efgh"}, "cdefgh"},
		"one write past max": {[]string{"abcdefghij"}, "efghij"},
	} {
		t.Run(name, func(t *testing.T) {
			b := &SyncBuffer{Max: 6, Tail: true}
			for _, w := range tc.writes {
				n, err := b.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			assert.Equal(t, tc.want, b.String())
		})
	}
}

// TestSharedTemporalStateSaysItRuns: what a test that cannot reach the
// shared dev server logs names its state.
func TestSharedTemporalStateSaysItRuns(t *testing.T) {
	Temporal(t)
	assert.Contains(t, SharedTemporalState(), "the shared Temporal dev server is running (pid ")
}
