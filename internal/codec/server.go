package codec

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"go.temporal.io/sdk/converter"
)

// Handler is the codec server the Temporal UI calls to show payloads
// decrypted: POST /decode and /encode with the payloads as JSON, as the UI
// sends them (Temporal's "codec server" protocol), and GET /healthz. uiOrigin is the UI's
// origin, which its browser requests come from; with token set, a request
// must carry "Authorization: Bearer <token>" (the UI's passAccessToken, or
// a proxy in front that adds it), else anyone who reaches the server reads
// every history.
func Handler(c *Codec, uiOrigin, token string) http.Handler {
	codec := converter.NewPayloadCodecHTTPHandler(c)
	want := sha256.Sum256([]byte("Bearer " + token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if uiOrigin != "" && r.Header.Get("Origin") == uiOrigin {
			w.Header().Set("Access-Control-Allow-Origin", uiOrigin)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
			w.Header().Set("Access-Control-Allow-Methods", "POST")
			w.Header().Add("Vary", "Origin")
		}
		switch {
		case r.Method == http.MethodOptions:
			w.WriteHeader(http.StatusOK)
			return
		case r.Method == http.MethodGet && r.URL.Path == "/healthz":
			_, _ = w.Write([]byte("ok\n"))
			return
		}
		if token != "" {
			got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="Quartermaster codec server"`)
				http.Error(w, "a bearer token is required", http.StatusUnauthorized)
				return
			}
		}
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/decode") && !strings.HasSuffix(r.URL.Path, "/encode") {
			http.Error(w, "POST /decode or /encode", http.StatusNotFound)
			return
		}
		codec.ServeHTTP(w, r)
	})
}
