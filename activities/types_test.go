package activities

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBegunReadsAsADuration: a history shows maxPolling as "10m0s", and the
// nanoseconds of histories recorded before still decode.
func TestBegunReadsAsADuration(t *testing.T) {
	raw, err := json.Marshal(Begun{Generation: 3, MaxPolling: 10 * time.Minute})
	require.NoError(t, err)
	assert.JSONEq(t, `{"generation": 3, "maxPolling": "10m0s"}`, string(raw))

	for _, tc := range []struct {
		name, json string
		want       Begun
	}{
		{"a duration", `{"generation": 3, "maxPolling": "10m0s"}`, Begun{Generation: 3, MaxPolling: 10 * time.Minute}},
		{"nanoseconds, as older histories hold", `{"generation": 3, "maxPolling": 600000000000}`, Begun{Generation: 3, MaxPolling: 10 * time.Minute}},
		{"done early", `{"done": true, "generation": 2, "maxPolling": 0}`, Begun{Done: true, Generation: 2}},
		{"no maxPolling", `{"generation": 1}`, Begun{Generation: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Begun
			require.NoError(t, json.Unmarshal([]byte(tc.json), &got))
			assert.Equal(t, tc.want, got)
		})
	}
	var bad Begun
	assert.ErrorContains(t, json.Unmarshal([]byte(`{"maxPolling": "soon"}`), &bad), "maxPolling")
}
