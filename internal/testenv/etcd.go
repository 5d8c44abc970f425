package testenv

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// CompactEtcd compacts the cluster's etcd up to its current revision, as
// the API server does on its own every five minutes: whatever refers to an
// older resourceVersion (a list's continue token, a watch's start) has
// expired afterwards. It speaks etcd's JSON gateway, so that tests need no
// etcd client.
func (c *Cluster) CompactEtcd(t testing.TB) {
	t.Helper()
	var status struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// The range of one key answers with the store's current revision.
	etcdCall(t, c.EtcdURL+"/v3/kv/range", map[string]any{"key": "AA=="}, &status)
	revision, err := strconv.ParseInt(status.Header.Revision, 10, 64)
	if err != nil {
		t.Fatalf("etcd's revision %q: %v", status.Header.Revision, err)
	}
	etcdCall(t, c.EtcdURL+"/v3/kv/compaction", map[string]any{"revision": revision, "physical": true}, nil)
}

// etcdCall posts body to one of etcd's gateway endpoints and decodes the
// answer into out (nil: not read).
func etcdCall(t testing.TB, url string, body, out any) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatalf("encoding %s's request: %v", url, err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("calling etcd: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s (%v)", url, resp.StatusCode, answer, err)
	}
	if out != nil {
		if err := json.Unmarshal(answer, out); err != nil {
			t.Fatalf("decoding %s's answer %s: %v", url, answer, err)
		}
	}
}
