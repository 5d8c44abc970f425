package activities_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"

	"github.com/quartermaster/qm/activities"
)

// TestPermanent: the one rule for errors that retrying cannot fix, which
// the workflows read their failure's kind from.
func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		kind string
		ok   bool
	}{
		{"a template that does not render", temporal.NewNonRetryableApplicationError("line 3", activities.ErrTemplate, nil), activities.ErrTemplate, true},
		{"a target deleted while its operation ran", temporal.NewNonRetryableApplicationError("gone", activities.ErrGone, nil), activities.ErrGone, true},
		{"wrapped, as an activity's error reaches the workflow", fmt.Errorf("activity: %w", temporal.NewNonRetryableApplicationError("x", activities.ErrApply, nil)), activities.ErrApply, true},
		{"a retryable application error", temporal.NewApplicationError("later", activities.ErrApply), "", false},
		{"a plain error, such as a timeout", errors.New("context deadline exceeded"), "", false},
		{"none", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, ok := activities.Permanent(tc.err)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.kind, kind)
		})
	}
}
