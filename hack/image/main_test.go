package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestImage builds the image of this checkout's qm and checks what a
// cluster relies on: the user is not root, the entrypoint is qm, the OCI
// labels are set, and the one layer holds a static qm, the CA bundle and
// /tmp, and no shell; and that a second build gives the same digest.
func TestImage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "qm.tar")
	require.NoError(t, Build(Options{Module: "../..", Out: out, Ref: "ghcr.io/quartermaster/qm:test", Version: "1.2.3", Revision: "abc",
		CABundle: "testdata/ca.crt"}))

	img := readArchive(t, out)
	// The same qm, built again, gives the same digest: a digest names a
	// build, not a moment.
	again := filepath.Join(t.TempDir(), "qm.tar")
	require.NoError(t, Build(Options{Module: "../..", Out: again, Ref: "ghcr.io/quartermaster/qm:test", Version: "1.2.3", Revision: "abc",
		CABundle: "testdata/ca.crt"}))
	digest, err := img.Digest()
	require.NoError(t, err)
	againDigest, err := readArchive(t, again).Digest()
	require.NoError(t, err)
	assert.Equal(t, digest, againDigest, "a second build of the same qm")

	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "65532:65532", cfg.Config.User)
	assert.Equal(t, []string{"/qm"}, cfg.Config.Entrypoint)
	assert.Empty(t, cfg.Config.Cmd)
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, "amd64", cfg.Architecture)
	assert.Equal(t, map[string]string{
		"org.opencontainers.image.title":       "qm",
		"org.opencontainers.image.description": "Quartermaster: a Kubernetes service broker and registry on Temporal",
		"org.opencontainers.image.source":      "https://github.com/quartermaster/qm",
		"org.opencontainers.image.version":     "1.2.3",
		"org.opencontainers.image.revision":    "abc",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}, cfg.Config.Labels)
	mediaType, err := img.MediaType()
	require.NoError(t, err)
	assert.EqualValues(t, "application/vnd.oci.image.manifest.v1+json", mediaType)

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	layer, err := io.ReadAll(rc)
	require.NoError(t, err)
	assertTrailer(t, layer, "the layer")
	entries := map[string]*tar.Header{}
	var qm []byte
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		entries[h.Name] = h
		if h.Name == "qm" {
			qm, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "tmp/", "qm"}, names, "nothing else: no shell")
	assert.EqualValues(t, 0o1777, entries["tmp/"].Mode, "a writable /tmp")
	assert.EqualValues(t, 0o755, entries["qm"].Mode)

	bin, err := elf.NewFile(bytes.NewReader(qm))
	require.NoError(t, err, "qm is a Linux binary")
	for _, p := range bin.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "qm is static: no dynamic loader")
	}

	// The image's qm tells the version and revision of its labels.
	exe := filepath.Join(t.TempDir(), "qm")
	require.NoError(t, os.WriteFile(exe, qm, 0o755))
	printed, err := exec.Command(exe, "version").CombinedOutput()
	require.NoError(t, err, "%s", printed)
	assert.Contains(t, string(printed), "qm 1.2.3 (revision abc; go")
}

// readArchive unpacks an oci-archive and returns its one image, named as
// docker load names it.
func readArchive(t *testing.T, path string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	archive, err := os.ReadFile(path)
	require.NoError(t, err)
	assertTrailer(t, archive, "the archive")
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		target := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(target, 0o755))
			continue
		}
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(target, data, 0o644))
	}
	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	index, err := p.ImageIndex()
	require.NoError(t, err)
	manifest, err := index.IndexManifest()
	require.NoError(t, err)
	require.Len(t, manifest.Manifests, 1)
	desc := manifest.Manifests[0]
	assert.Equal(t, "test", desc.Annotations["org.opencontainers.image.ref.name"])
	assert.Equal(t, "ghcr.io/quartermaster/qm:test", desc.Annotations["io.containerd.image.name"])
	img, err := p.Image(desc.Digest)
	require.NoError(t, err)
	return img
}

// assertTrailer checks that a tar stream ends as tar(1) expects it to: Go's
// reader takes a truncated one for a whole one.
func assertTrailer(t *testing.T, b []byte, what string) {
	t.Helper()
	require.Zero(t, len(b)%512, "%s is whole 512-byte blocks", what)
	require.GreaterOrEqual(t, len(b), 1024)
	assert.Equal(t, make([]byte, 1024), b[len(b)-1024:], "%s ends with two zero blocks", what)
}
