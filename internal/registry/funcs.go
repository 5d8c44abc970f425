package registry

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"text/template"
	"time"
)

// DefaultDictionary is what generated passwords are made of unless a
// template names another.
const DefaultDictionary = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// Funcs returns the template functions that read and persist registry
// values. Each generator stores what it makes under the key it is given and
// returns the stored value on every later call, so that a retry or an update
// never produces a second password, key or certificate.
//
//	{{ registry "key" }}                      any non-reserved value
//	{{ setRegistry "key" value }}             stores value, renders nothing
//	{{ generatePassword "key" 32 }}           letters and digits
//	{{ generatePassword "key" 16 "abc123" }}  from a dictionary
//	{{ generatePrivateKey "key" "rsa" 2048 }} rsa, ec (256, 384, 521) or ed25519; PKCS#8 PEM
//	{{ generateCertificate "key" (dict "type" "server" "key" "server-key"
//	     "commonName" "db" "dnsNames" (list "db.svc") "signerCert" "ca" "signerKey" "ca-key") }}
func (r *Registry) Funcs() template.FuncMap {
	return template.FuncMap{
		"registry": r.Get,
		"setRegistry": func(key string, value any) (string, error) {
			return "", r.Set(key, value)
		},
		"generatePassword":    r.generatePassword,
		"generatePrivateKey":  r.generatePrivateKey,
		"generateCertificate": r.generateCertificate,
	}
}

// stored returns the string already stored under key, if any.
func (r *Registry) stored(key, what string) (string, bool, error) {
	v, ok := r.values[key]
	if !ok {
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, fmt.Errorf("registry key %q holds a %T, not a %s", key, v, what)
	}
	return s, true, nil
}

func (r *Registry) generatePassword(key string, length int, dictionary ...string) (string, error) {
	if s, ok, err := r.stored(key, "password"); ok || err != nil {
		return s, err
	}
	if length < 1 || length > 4096 {
		return "", fmt.Errorf("generatePassword %q: length %d is not between 1 and 4096", key, length)
	}
	dict := DefaultDictionary
	if len(dictionary) > 0 {
		dict = dictionary[0]
	}
	alphabet := []rune(dict)
	if len(alphabet) < 2 {
		return "", fmt.Errorf("generatePassword %q: the dictionary needs at least two characters", key)
	}
	out := make([]rune, length)
	limit := big.NewInt(int64(len(alphabet)))
	for i := range out {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return "", fmt.Errorf("generatePassword %q: %w", key, err)
		}
		out[i] = alphabet[n.Int64()]
	}
	return string(out), r.Set(key, string(out))
}

func (r *Registry) generatePrivateKey(key, algorithm string, bits ...int) (string, error) {
	if s, ok, err := r.stored(key, "private key"); ok || err != nil {
		return s, err
	}
	size := 0
	if len(bits) > 0 {
		size = bits[0]
	}
	var k crypto.Signer
	var err error
	switch algorithm {
	case "rsa":
		if size == 0 {
			size = 2048
		}
		if size < 2048 || size > 8192 {
			return "", fmt.Errorf("generatePrivateKey %q: RSA keys are 2048 to 8192 bits, not %d", key, size)
		}
		k, err = rsa.GenerateKey(rand.Reader, size)
	case "ec", "ecdsa":
		curve, ok := map[int]elliptic.Curve{0: elliptic.P256(), 256: elliptic.P256(), 384: elliptic.P384(), 521: elliptic.P521()}[size]
		if !ok {
			return "", fmt.Errorf("generatePrivateKey %q: EC keys are 256, 384 or 521 bits, not %d", key, size)
		}
		k, err = ecdsa.GenerateKey(curve, rand.Reader)
	case "ed25519":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		return "", fmt.Errorf("generatePrivateKey %q: unknown algorithm %q (want rsa, ec or ed25519)", key, algorithm)
	}
	if err != nil {
		return "", fmt.Errorf("generatePrivateKey %q: %w", key, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", fmt.Errorf("generatePrivateKey %q: %w", key, err)
	}
	out := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	return out, r.Set(key, out)
}

// certOptions are the options of generateCertificate.
type certOptions struct {
	Type        string
	Key         string
	CommonName  string
	DNSNames    []string
	IPAddresses []net.IP
	SignerCert  string
	SignerKey   string
	Days        int
}

func (r *Registry) generateCertificate(key string, options map[string]any) (string, error) {
	if s, ok, err := r.stored(key, "certificate"); ok || err != nil {
		return s, err
	}
	o, err := parseCertOptions(options)
	if err != nil {
		return "", fmt.Errorf("generateCertificate %q: %w", key, err)
	}
	out, err := r.issue(o)
	if err != nil {
		return "", fmt.Errorf("generateCertificate %q: %w", key, err)
	}
	return out, r.Set(key, out)
}

func parseCertOptions(m map[string]any) (certOptions, error) {
	o := certOptions{Days: 365}
	str := func(name string) (string, error) {
		v, ok := m[name]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("option %q must be a string, not %T", name, v)
		}
		return s, nil
	}
	var err error
	for name, dst := range map[string]*string{
		"type": &o.Type, "key": &o.Key, "commonName": &o.CommonName,
		"signerCert": &o.SignerCert, "signerKey": &o.SignerKey,
	} {
		if *dst, err = str(name); err != nil {
			return o, err
		}
	}
	if v, ok := m["days"]; ok {
		switch d := v.(type) {
		case int:
			o.Days = d
		case int64:
			o.Days = int(d)
		case float64:
			o.Days = int(d)
		default:
			return o, fmt.Errorf("option \"days\" must be a number, not %T", v)
		}
	}
	for _, item := range asList(m["dnsNames"]) {
		o.DNSNames = append(o.DNSNames, fmt.Sprint(item))
	}
	for _, item := range asList(m["ipAddresses"]) {
		ip := net.ParseIP(fmt.Sprint(item))
		if ip == nil {
			return o, fmt.Errorf("%q is not an IP address", item)
		}
		o.IPAddresses = append(o.IPAddresses, ip)
	}
	switch {
	case o.Type != "ca" && o.Type != "server" && o.Type != "client":
		return o, fmt.Errorf("option \"type\" must be ca, server or client, not %q", o.Type)
	case o.Key == "":
		return o, errors.New("option \"key\" must name the registry key of the certificate's private key")
	case o.Type != "ca" && (o.SignerCert == "" || o.SignerKey == ""):
		return o, errors.New("a server or client certificate needs \"signerCert\" and \"signerKey\" registry keys")
	case o.Days < 1:
		return o, fmt.Errorf("option \"days\" must be at least 1, not %d", o.Days)
	}
	return o, nil
}

func asList(v any) []any {
	switch l := v.(type) {
	case []any:
		return l
	case []string:
		out := make([]any, len(l))
		for i, s := range l {
			out[i] = s
		}
		return out
	case nil:
		return nil
	default:
		return []any{l}
	}
}

func (r *Registry) issue(o certOptions) (string, error) {
	key, err := r.privateKey(o.Key)
	if err != nil {
		return "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: o.CommonName},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPAddresses,
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.AddDate(0, 0, o.Days),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if _, isRSA := key.(*rsa.PrivateKey); isRSA {
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	parent, signer := tmpl, key
	switch o.Type {
	case "ca":
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	case "server":
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case "client":
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if o.Type != "ca" {
		if parent, err = r.certificate(o.SignerCert); err != nil {
			return "", err
		}
		if signer, err = r.privateKey(o.SignerKey); err != nil {
			return "", err
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), nil
}

func (r *Registry) privateKey(regKey string) (crypto.Signer, error) {
	block, err := r.pemBlock(regKey, "private key")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("registry key %q: %w", regKey, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("registry key %q: %T cannot sign", regKey, k)
	}
	return signer, nil
}

func (r *Registry) certificate(regKey string) (*x509.Certificate, error) {
	block, err := r.pemBlock(regKey, "certificate")
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("registry key %q: %w", regKey, err)
	}
	return c, nil
}

func (r *Registry) pemBlock(regKey, what string) (*pem.Block, error) {
	s, ok, err := r.stored(regKey, what)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("registry key %q holds no %s: generate it first", regKey, what)
	}
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, fmt.Errorf("registry key %q does not hold a PEM %s", regKey, what)
	}
	return block, nil
}
