package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoopbackPortsAreFreeDistinctAndBelowTheEphemeralRange(t *testing.T) {
	ports, err := Loopback(50)
	require.NoError(t, err)
	require.Len(t, ports, 50)
	seen := map[int]bool{}
	for _, p := range ports {
		assert.GreaterOrEqual(t, p, Low)
		assert.Less(t, p, 32768, "a port the kernel may give an outgoing connection")
		assert.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		// Free once Loopback returns: a server can listen on it.
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if assert.NoError(t, err, "port %d", p) {
			require.NoError(t, ln.Close())
		}
	}
}

func TestLoopbackSkipsAPortTaken(t *testing.T) {
	// Twenty ports listened on, then 2,000 asked for: about three of the
	// random picks land on a port listened on, and none may be returned.
	taken := map[int]bool{}
	for len(taken) < 20 {
		ports, err := Loopback(1)
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]))
		if err != nil {
			continue // taken meanwhile by another process
		}
		t.Cleanup(func() { _ = ln.Close() })
		taken[ports[0]] = true
	}
	ports, err := Loopback(2000)
	require.NoError(t, err)
	for _, p := range ports {
		assert.False(t, taken[p], "port %d is listened on", p)
	}
}
