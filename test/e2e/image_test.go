package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/testenv"
)

// image is the container image `make image` writes, unpacked: its files
// under root, and the configuration a runtime starts its containers with.
type image struct {
	root   string
	config ocispec.ImageConfig
}

// imageArchive is bin/qm-image.tar; the test fails, naming the command that
// writes it, when it is missing.
func imageArchive(t *testing.T) string {
	t.Helper()
	path := filepath.Join(testenv.BinDir(), "qm-image.tar")
	_, err := os.Stat(path)
	require.NoError(t, err, "the image is missing: run `make image` (make test-pods does it for you)")
	return path
}

// unpackImage reads an oci-archive (an OCI image layout in a tar file) as a
// runtime pulls it: index, manifest, configuration, then each layer's files
// in order.
func unpackImage(t *testing.T, archive string) image {
	t.Helper()
	blobs := map[string][]byte{}
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "reading %s", archive)
		if h.Typeflag == tar.TypeReg {
			blobs[h.Name], err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	blob := func(d ocispec.Descriptor) []byte {
		raw, ok := blobs["blobs/"+d.Digest.Algorithm().String()+"/"+d.Digest.Encoded()]
		require.True(t, ok, "the archive holds the blob %s", d.Digest)
		return raw
	}
	var index ocispec.Index
	require.NoError(t, json.Unmarshal(blobs["index.json"], &index), "the archive's index.json")
	require.Len(t, index.Manifests, 1, "one image in the archive")
	var manifest ocispec.Manifest
	require.NoError(t, json.Unmarshal(blob(index.Manifests[0]), &manifest))
	var cfg ocispec.Image
	require.NoError(t, json.Unmarshal(blob(manifest.Config), &cfg))

	img := image{root: t.TempDir(), config: cfg.Config}
	// Any user may read the image, as a runtime's containers may.
	require.NoError(t, openDirs(img.root))
	for _, layer := range manifest.Layers {
		var r io.Reader = bytes.NewReader(blob(layer))
		if strings.HasSuffix(layer.MediaType, "+gzip") {
			r, err = gzip.NewReader(r)
			require.NoError(t, err)
		}
		require.NoError(t, extract(tar.NewReader(r), img.root), "unpacking the layer %s", layer.Digest)
	}
	return img
}

// extract writes a layer's directories and regular files under root.
func extract(tr *tar.Reader, root string) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("the layer's path %q leaves the image's root", h.Name)
		}
		path := filepath.Join(root, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, data, h.FileInfo().Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the layer's %s is of a type this test does not unpack (%c)", h.Name, h.Typeflag)
		}
	}
}
