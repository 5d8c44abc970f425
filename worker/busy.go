package worker

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
)

// The waits between two calls to a worker deployment that was too busy to
// answer: from busyFirst, doubling up to busyMax.
const (
	busyFirst = 200 * time.Millisecond
	busyMax   = 5 * time.Second
)

// busy says Temporal refused a call to the worker deployment for now
// ("too many requests issued to Worker Deployment … Please try again
// later"): its workflow was busy, typically with another worker's call of
// the same moment (two pods of a release start together). The SDK does not
// retry it; asked again a moment later, the server answers.
func busy(err error) bool {
	var exhausted *serviceerror.ResourceExhausted
	return errors.As(err, &exhausted)
}

// retryBusy calls f until it returns anything but busy, waiting longer
// each time, or until ctx is done (then it returns f's last error).
func retryBusy(ctx context.Context, f func() error) error {
	wait := busyFirst
	for {
		err := f()
		if !busy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, busyMax)
	}
}
