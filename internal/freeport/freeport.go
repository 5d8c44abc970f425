// Package freeport finds loopback ports that a server started later may
// listen on.
//
// A port the kernel hands out for "127.0.0.1:0" comes from the ephemeral
// range (32768 and up here), which is also where every outgoing
// connection's local port comes from. Between the moment a port is found
// and the moment the server that was given it binds (for qm dev's
// Temporal, after Kubernetes has started: seconds), any connection on the
// machine may take it, and the server then exits as it starts. That
// happened to a test under make test's load. Ports below the ephemeral
// range are taken only by servers that ask for them, so freeport picks
// there, at random, and checks each by listening on it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// The range picked from: above the ports services are usually configured
// on, below the kernel's ephemeral range (net.ipv4.ip_local_port_range's
// default starts at 32768). Temporal's SQL schema keeps a membership port
// in a smallint, which any port here fits.
const (
	Low  = 20000
	High = 32767
)

// Loopback returns n distinct ports between Low and High that no one
// listens on now on 127.0.0.1. Each is held until all are found, so that no
// two are the same.
func Loopback(n int) ([]int, error) {
	out := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			_ = ln.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n+1000 {
			return nil, fmt.Errorf("no %d free loopback ports between %d and %d", n, Low, High)
		}
		port := Low + rand.IntN(High-Low+1)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken, or ours already
		}
		held = append(held, ln)
		out = append(out, port)
	}
	return out, nil
}
