package codec_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/quartermaster/qm/internal/codec"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// TestRoundTrip: what the codec encodes holds nothing in clear, and only a
// codec with the key decodes it, however the keys rotated since.
func TestRoundTrip(t *testing.T) {
	old, err := codec.New(map[string][]byte{"k1": key(1)}, "k1")
	require.NoError(t, err)
	rotated, err := codec.New(map[string][]byte{"k1": key(1), "k2": key(2)}, "k2")
	require.NoError(t, err)
	stranger, err := codec.New(map[string][]byte{"k9": key(9)}, "k9")
	require.NoError(t, err)
	plain, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"password": "hunter2"})
	require.NoError(t, err)

	for _, tc := range []struct {
		name       string
		enc, dec   *codec.Codec
		wantKey    string
		wantDecode string
	}{
		{"the same key", old, old, "k1", ""},
		{"written before a rotation, read after it", old, rotated, "k1", ""},
		{"written after it, with the new key", rotated, rotated, "k2", ""},
		{"without the key", rotated, stranger, "k2", `a payload encrypted with key "k2", which is not among this process's keys`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := tc.enc.Encode([]*commonpb.Payload{plain})
			require.NoError(t, err)
			require.Len(t, enc, 1)
			assert.Equal(t, codec.Encoding, string(enc[0].Metadata[converter.MetadataEncoding]))
			assert.Equal(t, tc.wantKey, string(enc[0].Metadata[codec.MetadataKeyID]))
			assert.NotContains(t, string(enc[0].Data), "hunter2", "nothing in clear")
			dec, err := tc.dec.Decode(enc)
			if tc.wantDecode != "" {
				require.EqualError(t, err, tc.wantDecode)
				return
			}
			require.NoError(t, err)
			var got map[string]string
			require.NoError(t, converter.GetDefaultDataConverter().FromPayload(dec[0], &got))
			assert.Equal(t, "hunter2", got["password"])
		})
	}

	t.Run("a payload from before the codec is read as it is", func(t *testing.T) {
		dec, err := old.Decode([]*commonpb.Payload{plain})
		require.NoError(t, err)
		assert.Equal(t, plain, dec[0])
	})
	t.Run("tampered ciphertext is refused", func(t *testing.T) {
		enc, err := old.Encode([]*commonpb.Payload{plain})
		require.NoError(t, err)
		enc[0].Data[len(enc[0].Data)-1] ^= 1
		_, err = old.Decode(enc)
		require.ErrorContains(t, err, `decrypting a payload of key "k1"`)
	})
	t.Run("two encodings of one payload differ", func(t *testing.T) {
		a, err := old.Encode([]*commonpb.Payload{plain})
		require.NoError(t, err)
		b, err := old.Encode([]*commonpb.Payload{plain})
		require.NoError(t, err)
		assert.NotEqual(t, a[0].Data, b[0].Data, "a fresh nonce each time")
	})
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "raw"), key(3), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b64"), []byte(base64.StdEncoding.EncodeToString(key(4))+"\n"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "..data"), 0o700), "a mounted Secret's own entries are skipped")
	for _, tc := range []struct{ name, current, err string }{
		{"raw bytes", "raw", ""},
		{"base64", "b64", ""},
		{"no such key", "k7", `no key "k7" to encrypt with among b64, raw`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := codec.Load(dir, tc.current)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
		})
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "short"), []byte("abc"), 0o600))
	_, err := codec.Load(dir, "raw")
	require.EqualError(t, err, `payload key "short" is neither 32 bytes nor their base64`)
}
