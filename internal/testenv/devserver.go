package testenv

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/quartermaster/qm/internal/devserver"
)

// devServerAttempts bounds the starts of a dev server whose port was taken
// as it started. The CLI picks its services' ports free and binds them a
// moment later; beside a package's parallel tests, each opening
// connections, another process now and then takes one in between, and the
// server exits with "address already in use".
const devServerAttempts = 3

// startOutput is how much of a dev server's output a start keeps, to say
// why it failed: the start's messages come first.
const startOutput = 64 << 10

// startDevServer starts a dev server as devserver.Start does, again when
// one of its ports was taken as it started, and names the server's own
// words when it fails otherwise.
func startDevServer(ctx context.Context, opts devserver.Options) (*devserver.Server, error) {
	var err error
	var said string
	for range devServerAttempts {
		out := &SyncBuffer{Max: startOutput}
		o := opts
		o.Out = out
		if opts.Out != nil {
			o.Out = io.MultiWriter(opts.Out, out)
		}
		var srv *devserver.Server
		if srv, err = devserver.Start(ctx, o); err == nil {
			return srv, nil
		}
		all := out.String()
		said = all[max(0, len(all)-2000):]
		if !strings.Contains(all, "address already in use") || ctx.Err() != nil {
			return nil, fmt.Errorf("%w; it said: %s", err, said)
		}
	}
	return nil, fmt.Errorf("%w (a port taken as it started, %d times); it said: %s", err, devServerAttempts, said)
}
