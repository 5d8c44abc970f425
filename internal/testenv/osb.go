package testenv

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Request sends an OSB request to the System's API with the platform's
// credentials and version header, and returns the status, the body and the
// response headers. A header given as "" is removed. Like HTTP, it never
// fails the test: status 0 is a request that got no reply.
func (s *System) Request(method, path, body string, header map[string]string) (int, string, http.Header) {
	h := maps.Clone(OSBHeader)
	maps.Copy(h, header)
	return HTTPWith(s.client(), method, s.URL+path, body, &OSBCredentials, h)
}

// Do is Request on the test's goroutine: a request that got no reply
// fails the test.
func (s *System) Do(method, path, body string, header map[string]string) (int, string, http.Header) {
	s.t.Helper()
	status, got, headers := s.Request(method, path, body, header)
	require.NotZero(s.t, status, "%s %s: %s", method, path, got)
	return status, got, headers
}

// Expect sends a request and checks its status and, unless wantBody is
// empty, its JSON body.
func (s *System) Expect(method, path, body string, wantStatus int, wantBody string) string {
	s.t.Helper()
	status, got, _ := s.Do(method, path, body, nil)
	assert.Equal(s.t, wantStatus, status, "%s %s: %s", method, path, got)
	if wantBody != "" && json.Valid([]byte(got)) {
		assert.JSONEq(s.t, wantBody, got, "%s %s", method, path)
	} else if wantBody != "" {
		s.t.Errorf("%s %s: the body is not JSON: %q", method, path, got)
	}
	return got
}

// ExpectSoon repeats a GET until it answers wantStatus and wantBody (JSON),
// and fails if it has not within 30 s. last_operation is answered from the
// API's informer cache, which may speak of an operation's last state for as
// long as its watch lags behind the API server; ExpectSoon is for the
// checks that follow an operation's end.
func (s *System) ExpectSoon(path string, wantStatus int, wantBody string) {
	s.t.Helper()
	require.EventuallyWithT(s.t, func(c *assert.CollectT) {
		status, got, _ := HTTPWith(s.client(), http.MethodGet, s.URL+path, "", &OSBCredentials, OSBHeader)
		assert.Equal(c, wantStatus, status, "GET %s: %s", path, got)
		if assert.True(c, json.Valid([]byte(got)), "GET %s: the body is not JSON: %q", path, got) {
			assert.JSONEq(c, wantBody, got, "GET %s", path)
		}
	}, 30*time.Second, 20*time.Millisecond, "GET %s answers %d", path, wantStatus)
}

// PollLastOperation polls path until the state is no longer in progress
// and returns the final body.
func (s *System) PollLastOperation(path string) map[string]any {
	s.t.Helper()
	var last map[string]any
	require.EventuallyWithT(s.t, func(c *assert.CollectT) {
		status, body, _ := HTTPWith(s.client(), http.MethodGet, s.URL+path, "", &OSBCredentials, OSBHeader)
		require.Equal(c, http.StatusOK, status, body)
		last = nil
		require.NoError(c, json.Unmarshal([]byte(body), &last))
		assert.NotEqual(c, "in progress", last["state"])
	}, 60*time.Second, 50*time.Millisecond, "%s ends", path)
	return last
}

// OpenGate lets the gated operation (templates "gated" and
// "gated-password") of the instance named name finish: gate is "gate" for
// a provision, "update-gate" for an update.
func (s *System) OpenGate(name, gate string) {
	s.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + gate, Namespace: s.Namespace}}
	require.NoError(s.t, s.Kube.Client.Create(context.Background(), cm))
}

// GetInstance reads an SFServiceInstance of the System's namespace.
func (s *System) GetInstance(name string) (*osbv1alpha1.SFServiceInstance, error) {
	var inst osbv1alpha1.SFServiceInstance
	err := s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &inst)
	return &inst, err
}

// CountInstances counts the SFServiceInstances of the System's namespace.
func (s *System) CountInstances() int {
	s.t.Helper()
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(s.t, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)))
	return len(list.Items)
}

// client is what the System's requests go through: Client, or Go's default.
func (s *System) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return http.DefaultClient
}
