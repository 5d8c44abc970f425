package devenv

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/quartermaster/qm/api"
)

// credentials returns API credentials of qm dev: the ones in the
// environment variables userEnv/passEnv, or those generated on the first
// The files under the data directory in which `qm dev` keeps the
// credentials it made for the OSB and the admin API; `qm mass-update`
// reads the admin ones when given none.
const (
	OSBCredentialsFile   = "osb-credentials.json"
	AdminCredentialsFile = "admin-credentials.json"
)

// SavedAdminCredentials reads the admin API's credentials that `qm dev`
// keeps under dataDir; ok is false when it has made none there.
func SavedAdminCredentials(dataDir string) (c api.Credentials, ok bool, err error) {
	path := filepath.Join(dataDir, AdminCredentialsFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("reading the admin credentials of qm dev: %w", err)
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.Username == "" || c.Password == "" {
		return c, false, fmt.Errorf("%s is damaged; delete it and restart qm dev for new credentials", path)
	}
	return c, true, nil
}

// start and kept in file in the data directory, so that a restart keeps them.
func credentials(dataDir, file, userEnv, passEnv, user string) (api.Credentials, error) {
	if u, p := os.Getenv(userEnv), os.Getenv(passEnv); u != "" && p != "" {
		return api.Credentials{Username: u, Password: p}, nil
	}
	path := filepath.Join(dataDir, file)
	var c api.Credentials
	if raw, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(raw, &c); err != nil || c.Username == "" || c.Password == "" {
			return c, fmt.Errorf("%s is damaged; delete it for new credentials", path)
		}
		return c, nil
	}
	secret := make([]byte, 18)
	if _, err := rand.Read(secret); err != nil {
		return c, err
	}
	c = api.Credentials{Username: user, Password: base64.RawURLEncoding.EncodeToString(secret)}
	raw, err := json.Marshal(c)
	if err != nil {
		return c, err
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return c, fmt.Errorf("keeping the credentials in %s: %w", path, err)
	}
	return c, nil
}
