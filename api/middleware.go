package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// SupportedMajor is the major OSB API version served.
const SupportedMajor = 2

// Credentials are a username and password for basic auth.
type Credentials struct {
	Username string
	Password string
}

// basicAuth answers 401 unless the request carries creds. The comparison
// takes the same time whatever the input, so that it reveals nothing.
func basicAuth(realm string, creds Credentials) func(http.Handler) http.Handler {
	wantUser := sha256.Sum256([]byte(creds.Username))
	wantPass := sha256.Sum256([]byte(creds.Password))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, ok := r.BasicAuth()
			gotUser := sha256.Sum256([]byte(user))
			gotPass := sha256.Sum256([]byte(pass))
			userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
			passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
			if !ok || userOK&passOK != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="`+realm+`"`)
				writeError(w, http.StatusUnauthorized, "", "missing or wrong credentials")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// certOrBasicAuth lets a request through that came with a verified client
// certificate (only when the API has client CAs, see TLS.ClientCAFile), and
// otherwise asks for basic auth.
func certOrBasicAuth(realm string, creds Credentials) func(http.Handler) http.Handler {
	basic := basicAuth(realm, creds)
	return func(next http.Handler) http.Handler {
		withBasic := basic(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if clientCertified(r) {
				next.ServeHTTP(w, r)
				return
			}
			withBasic.ServeHTTP(w, r)
		})
	}
}

// brokerAPIVersion checks X-Broker-API-Version: missing is 400, another
// major version is 412 Precondition Failed, as the OSB spec says.
func brokerAPIVersion(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("X-Broker-API-Version")
		if v == "" {
			writeError(w, http.StatusBadRequest, "", "the X-Broker-API-Version header is missing")
			return
		}
		majorStr, _, _ := strings.Cut(v, ".")
		major, err := strconv.Atoi(majorStr)
		if err != nil {
			writeError(w, http.StatusBadRequest, "", "X-Broker-API-Version "+strconv.Quote(v)+" is not a version")
			return
		}
		if major != SupportedMajor {
			writeError(w, http.StatusPreconditionFailed, "",
				"X-Broker-API-Version "+strconv.Quote(v)+" is not supported; this broker serves 2.x (up to 2.17)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requestIdentityHeader is OSB's header for a platform's own request ID.
const requestIdentityHeader = "X-Broker-API-Request-Identity"

// maxRequestIdentity caps the request identity: it is written into every
// log line of the request.
const maxRequestIdentity = 256

// requestIdentity echoes X-Broker-API-Request-Identity, so that a platform
// can match a response to its request, and gives a request without one an
// identity of its own, so that a 500's answer can point to its log lines.
func requestIdentity(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestIdentityHeader)
		switch {
		case len(id) > maxRequestIdentity:
			writeError(w, http.StatusBadRequest, "", fmt.Sprintf("%s has %d bytes; at most %d are taken", requestIdentityHeader, len(id), maxRequestIdentity))
			return
		case id == "":
			id = uuid.NewString()
			r.Header.Set(requestIdentityHeader, id)
		}
		w.Header().Set(requestIdentityHeader, id)
		next.ServeHTTP(w, r)
	})
}
