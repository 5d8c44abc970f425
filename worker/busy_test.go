package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
)

func TestRetryBusy(t *testing.T) {
	tooMany := &serviceerror.ResourceExhausted{Message: "too many requests issued to Worker Deployment 'qm'. Please try again later"}
	other := errors.New("refused")
	cases := []struct {
		name    string
		answers []error // what the calls return, in turn; the last again after them
		timeout time.Duration
		calls   int // how many calls; at least that many when the context ends them
		want    error
	}{
		{name: "answered at once", answers: []error{nil}, timeout: time.Minute, calls: 1},
		{name: "busy twice, then answered", answers: []error{tooMany, tooMany, nil}, timeout: time.Minute, calls: 3},
		{name: "another error is returned at once", answers: []error{other}, timeout: time.Minute, calls: 1, want: other},
		{name: "busy until the context ends", answers: []error{tooMany}, timeout: time.Second, calls: 2, want: tooMany},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			calls := 0
			err := retryBusy(ctx, func() error {
				calls++
				return c.answers[min(calls, len(c.answers))-1]
			})
			if c.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.want)
			}
			if c.timeout < time.Minute {
				assert.GreaterOrEqual(t, calls, c.calls, "asked again before the context ended")
				return
			}
			assert.Equal(t, c.calls, calls)
		})
	}
}
