// Package codec encrypts what Quartermaster's runs carry through Temporal:
// inputs, results, signals, queries, memos and failure messages, which hold
// what users asked for and what their templates and the API server said.
// Temporal then stores only ciphertext, and whoever can read Temporal but
// has no key reads nothing. The Temporal UI shows the payloads through
// `qm codec-server` (Handler), to those it lets in.
//
// Keys are AES-256 keys, each a file of a directory (a mounted Secret) named
// by its key ID. One of them encrypts; every one decrypts, so that a new
// key can take over while runs encrypted with the old one go on: add the
// new file, point the key ID at it, and remove the old file once no
// history that needs it is kept.
package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// Metadata of an encrypted payload: its encoding, and the ID of the key
// that encrypted it.
const (
	Encoding      = "binary/encrypted"
	MetadataKeyID = "encryption-key-id"
)

// Codec is the AES-GCM payload codec: converter.PayloadCodec.
type Codec struct {
	current string
	keys    map[string]cipher.AEAD
}

// New is a Codec of keys by ID, encrypting with current's.
func New(keys map[string][]byte, current string) (*Codec, error) {
	c := &Codec{current: current, keys: map[string]cipher.AEAD{}}
	for id, key := range keys {
		if len(key) != 32 {
			return nil, fmt.Errorf("key %q has %d bytes; an AES-256 key has 32", id, len(key))
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		if c.keys[id], err = cipher.NewGCM(block); err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
	}
	if _, ok := c.keys[current]; !ok {
		return nil, fmt.Errorf("no key %q to encrypt with among %s", current, strings.Join(slices.Sorted(maps.Keys(c.keys)), ", "))
	}
	return c, nil
}

// Load reads the keys of dir, a file per key named by its ID, holding the
// 32 bytes of the key or their base64, and encrypts with current's.
// Kubernetes' own entries of a mounted Secret (..data and the like) are
// skipped.
func Load(dir, current string) (*Codec, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the payload keys: %w", err)
	}
	keys := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading payload key %q: %w", e.Name(), err)
		}
		if len(raw) != 32 {
			decoded, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
			if err != nil {
				return nil, fmt.Errorf("payload key %q is neither 32 bytes nor their base64", e.Name())
			}
			raw = decoded
		}
		keys[e.Name()] = raw
	}
	return New(keys, current)
}

// Encode encrypts each payload with the current key.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	aead := c.keys[c.current]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encoding a payload: %w", err)
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("a nonce: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(Encoding), MetadataKeyID: []byte(c.current)},
			Data:     aead.Seal(nonce, nonce, plain, []byte(c.current)),
		}
	}
	return out, nil
}

// Decode decrypts each encrypted payload with the key that encrypted it;
// one that is not encrypted (written before the codec was turned on) is
// left as it is.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != Encoding {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		aead, ok := c.keys[id]
		if !ok {
			return nil, fmt.Errorf("a payload encrypted with key %q, which is not among this process's keys", id)
		}
		data := p.GetData()
		if len(data) < aead.NonceSize() {
			return nil, fmt.Errorf("an encrypted payload of key %q is too short", id)
		}
		plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(id))
		if err != nil {
			return nil, fmt.Errorf("decrypting a payload of key %q: %w", id, err)
		}
		out[i] = &commonpb.Payload{}
		if err := proto.Unmarshal(plain, out[i]); err != nil {
			return nil, fmt.Errorf("decoding a decrypted payload: %w", err)
		}
	}
	return out, nil
}

// Converters are the data and failure converters of a Temporal client that
// encrypts with c: failure messages and stack traces go into the encrypted
// attributes, so that a history shows "Encoded failure" in their place.
func Converters(c *Codec) (converter.DataConverter, converter.FailureConverter) {
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
	return dc, temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc, EncodeCommonAttributes: true})
}
