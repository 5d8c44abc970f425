package temporalcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAServiceThatLostItsPortIsStartedAgain: a service (or PostgreSQL)
// that exited at start because a port it was given was taken says so
// (errPortTaken), which has Start pick new ports; any other exit is an
// error as it is.
func TestAServiceThatLostItsPortIsStartedAgain(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	require.NoError(t, os.Mkdir(filepath.Join(c.Dir, "logs"), 0o755))
	write := func(service, log string) {
		require.NoError(t, os.WriteFile(filepath.Join(c.Dir, "logs", service+".log"), []byte(log), 0o644))
	}
	write("frontend", `{"level":"fatal","msg":"Failed to start gRPC listener","error":"listen tcp 127.0.0.1:26450: bind: address already in use"}`)
	write("history", `{"level":"fatal","msg":"Unable to connect to SQL database"}`)
	write("postgres", "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use\nFATAL:  could not create any TCP/IP sockets\n")

	err := c.exitedAtStart("frontend")
	require.ErrorIs(t, err, errPortTaken)
	require.EqualError(t, err, "temporal frontend exited at start: a port picked for it was taken before it bound it")
	err = c.exitedAtStart("history")
	require.NotErrorIs(t, err, errPortTaken)
	require.EqualError(t, err, "temporal history exited at start")
	require.NotErrorIs(t, c.exitedAtStart("matching"), errPortTaken, "no log at all")
	require.True(t, c.lostPort("postgres"), "PostgreSQL's words for it")
	require.False(t, c.lostPort("history"))
}
