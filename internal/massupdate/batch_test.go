package massupdate

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBatchSize(t *testing.T) {
	for _, tc := range []struct{ concurrency, want int }{
		{0, 1}, {1, 1}, {2, 1}, {3, 2}, {10, 5}, {11, 6}, {50, 25}, {200, MaxBatch},
	} {
		assert.Equal(t, tc.want, BatchSize(tc.concurrency), "concurrency %d", tc.concurrency)
	}
}
