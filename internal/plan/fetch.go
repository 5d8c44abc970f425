package plan

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	utilcache "k8s.io/apimachinery/pkg/util/cache"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Fetcher downloads the bodies of templates that name a url: gotemplates
// and helm chart archives. It bounds each download (hosts, size, time) and
// keeps what it fetched for one generation of one plan, so that every
// render of a plan version sees the same body, however long an instance
// lives, and a change to the plan fetches again.
type Fetcher struct {
	// AllowedHosts, when set, are the only hosts a url may name (redirects
	// included). Empty allows any host.
	AllowedHosts []string
	// MaxBytes bounds a body (default DefaultMaxTemplateBytes).
	MaxBytes int64
	// Timeout bounds a download (default DefaultFetchTimeout).
	Timeout time.Duration

	once   sync.Once
	cache  *utilcache.LRUExpireCache
	client *http.Client
}

// Defaults of a Fetcher.
const (
	DefaultMaxTemplateBytes = 10 << 20
	DefaultFetchTimeout     = 30 * time.Second
	// fetchedTTL bounds how long a body is kept for a plan generation
	// nobody renders any more.
	fetchedTTL = 24 * time.Hour
)

// defaultFetcher serves a Subject that was given none.
var defaultFetcher = &Fetcher{}

func (f *Fetcher) init() {
	f.once.Do(func() {
		if f.MaxBytes <= 0 {
			f.MaxBytes = DefaultMaxTemplateBytes
		}
		if f.Timeout <= 0 {
			f.Timeout = DefaultFetchTimeout
		}
		f.cache = utilcache.NewLRUExpireCache(256)
		f.client = &http.Client{
			Timeout: f.Timeout,
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if len(via) >= 5 {
					return errors.New("more than 5 redirects")
				}
				return f.allowed(req.URL)
			},
		}
	})
}

// Fetch returns the body behind the url of plan's template tmpl. A url the
// bounds refuse, or a body over MaxBytes, is a *TemplateError: fetching
// again would not help. A download that fails otherwise is a plain error,
// to be retried.
func (f *Fetcher) Fetch(plan *osbv1alpha1.SFPlan, tmpl *osbv1alpha1.TemplateSpec) ([]byte, error) {
	f.init()
	key := fmt.Sprintf("%s/%d/%s", plan.UID, plan.Generation, tmpl.URL)
	if body, ok := f.cache.Get(key); ok {
		return body.([]byte), nil
	}
	u, err := url.Parse(tmpl.URL)
	if err != nil {
		return nil, templateError(tmpl.Action, fmt.Errorf("the url does not parse: %w", err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		// The CRD admits only these; a plan stored before that rule meets it here.
		return nil, templateError(tmpl.Action, fmt.Errorf("url %s: only http and https urls are fetched", u.Redacted()))
	}
	if err := f.allowed(u); err != nil {
		return nil, templateError(tmpl.Action, err)
	}
	body, err := f.get(tmpl.URL)
	var tooBig *tooBigError
	if errors.As(err, &tooBig) {
		return nil, templateError(tmpl.Action, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s template: fetching %s: %w", tmpl.Action, u.Redacted(), err)
	}
	f.cache.Add(key, body, fetchedTTL)
	return body, nil
}

// allowed checks a url's host against AllowedHosts.
func (f *Fetcher) allowed(u *url.URL) error {
	if len(f.AllowedHosts) == 0 || slices.Contains(f.AllowedHosts, u.Hostname()) {
		return nil
	}
	return fmt.Errorf("url %s: host %q is not among the allowed template hosts (%s)", u.Redacted(), u.Hostname(), strings.Join(f.AllowedHosts, ", "))
}

// tooBigError is a body over MaxBytes.
type tooBigError struct{ max int64 }

func (e *tooBigError) Error() string { return fmt.Sprintf("the body is larger than %d bytes", e.max) }

func (f *Fetcher) get(rawURL string) ([]byte, error) {
	resp, err := f.client.Get(rawURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > f.MaxBytes {
		return nil, &tooBigError{f.MaxBytes}
	}
	return body, nil
}
