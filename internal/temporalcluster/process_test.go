package temporalcluster

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAStopThatKillsSaysSo: a process that ignores SIGTERM is killed after
// its grace period, and the error says it was (ErrKilled), which
// OnlyKilled tells apart from a stop that failed otherwise.
func TestAStopThatKillsSaysSo(t *testing.T) {
	r, w := io.Pipe()
	stubborn := &process{name: "stubborn", path: "/bin/sh", args: []string{"-c", `trap "" TERM; echo trapped; while :; do sleep 1; done`}, out: w}
	require.NoError(t, stubborn.start())
	buf := make([]byte, len("trapped"))
	_, err := io.ReadFull(r, buf) // the trap is set before SIGTERM comes
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, r) }()
	err = stubborn.signal(syscall.SIGTERM, 200*time.Millisecond)
	require.ErrorIs(t, err, ErrKilled)
	assert.False(t, stubborn.running(), "killed")

	polite := &process{name: "polite", path: "/bin/sleep", args: []string{"60"}, out: io.Discard}
	require.NoError(t, polite.start())
	assert.NoError(t, polite.signal(syscall.SIGTERM, 10*time.Second), "a process that stops on SIGTERM is no error")
}

func TestOnlyKilled(t *testing.T) {
	killed := fmt.Errorf("matching did not stop: %w", ErrKilled)
	other := errors.New("removing the cluster's directory: permission denied")
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"one killed":            {killed, true},
		"two killed, joined":    {errors.Join(killed, killed), true},
		"killed and another":    {errors.Join(killed, other), false},
		"another":               {other, false},
		"killed, joined nested": {errors.Join(errors.Join(killed), killed), true},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, OnlyKilled(tc.err))
		})
	}
}
