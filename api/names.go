package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/rotation"
)

// MaxIDLength is the longest instance_id or binding_id taken: the longest
// Kubernetes name, so that the CRDs can state the same bound.
const MaxIDLength = validation.DNS1123SubdomainMaxLength

// successorForm is the form of the names rotation.SuccessorName gives:
// a binding_id of that form is hashed (BindingName), so that no platform's
// binding can take a rotation's successor's name.
var successorForm = regexp.MustCompile(`-r[0-9]+$`)

// ResourceName is the name of the SFServiceInstance or SFServiceBinding that
// records an OSB instance_id or binding_id: the ID itself when it is a valid
// Kubernetes name, otherwise its SHA-224 sum in hex, as the Service Fabrik
// broker does. The same ID always gives the same name; the ID itself is kept
// in the resource's spec.
func ResourceName(id string) string {
	if len(validation.IsDNS1123Subdomain(id)) == 0 {
		return id
	}
	return hashedName(id)
}

// BindingName is the name of the SFServiceBinding of an OSB binding_id:
// ResourceName, but hashed for an ID that reads as a rotation successor's
// name, which a binding of the same instance may be using.
func BindingName(id string) string {
	if successorForm.MatchString(id) {
		return hashedName(id)
	}
	return ResourceName(id)
}

func hashedName(id string) string {
	sum := sha256.Sum224([]byte(id))
	return hex.EncodeToString(sum[:])
}

// checkID refuses an ID outside the rule docs/osb.md states: 1 to
// MaxIDLength printable ASCII characters, no space.
func checkID(field, id string) *requestError {
	switch {
	case id == "":
		return badRequest("%s is empty", field)
	case len(id) > MaxIDLength:
		return badRequest("%s has %d characters; at most %d are taken", field, len(id), MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return badRequest("%s %q has byte %#02x at %d: IDs are printable ASCII without spaces", field, id, c, i)
		}
	}
	return nil
}

// canonicalID makes the URL parameter key an ID in its one canonical form,
// decoded from the path once, as the routes then read it with chi.URLParam:
// chi hands over the escaped segment when the path's escaping is not Go's
// own (a%62c) and the decoded one otherwise, so that a%62c and abc would be
// two IDs. An ID that still decodes to something else (a%2562c) was
// encoded twice, which no platform means: it is refused, as is one outside
// checkID's rule.
func canonicalID(key string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rctx := chi.RouteContext(r.Context())
			id := rctx.URLParam(key)
			if r.URL.RawPath != "" {
				decoded, err := url.PathUnescape(id)
				if err != nil {
					writeError(w, http.StatusBadRequest, "", fmt.Sprintf("%s %q is not percent-encoded correctly: %v", key, id, err))
					return
				}
				id = decoded
			}
			if again, err := url.PathUnescape(id); err == nil && again != id {
				writeError(w, http.StatusBadRequest, "", fmt.Sprintf("%s %q is percent-encoded twice; encode it once", key, id))
				return
			}
			if e := checkID(key, id); e != nil {
				writeError(w, e.status, "", e.description)
				return
			}
			// URLParam reads the last value of a key: this one.
			rctx.URLParams.Add(key, id)
			next.ServeHTTP(w, r)
		})
	}
}

// bindingName is where the SFServiceBinding of binding_id bid is, read
// through r: BindingName, or, for an ID of a successor's form, the name
// ResourceName gave it when it was recorded before BindingName hashed such
// IDs, if a binding of that ID (not a successor) is there.
func (s *Server) bindingName(ctx context.Context, r client.Reader, bid string) (string, *requestError) {
	name, earlier := BindingName(bid), ResourceName(bid)
	if name == earlier {
		return name, nil
	}
	var b osbv1alpha1.SFServiceBinding
	err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: earlier}, &b)
	switch {
	case err == nil && b.Spec.ID == bid && !rotation.IsSuccessor(&b):
		return earlier, nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", failure(fmt.Sprintf("reading binding %q", bid), err)
	}
	return name, nil
}
