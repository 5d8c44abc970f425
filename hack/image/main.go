// Command image writes the container image of qm as an OCI image tarball
// (an OCI image layout in a tar file),
// without Docker and without the network: a static qm, the CA bundle for
// TLS to Temporal and to chart hosts, a writable /tmp, nothing else (no
// shell), run as a non-root user. `make image` runs it; `docker load`, `podman load`
// or `skopeo copy oci-archive:bin/qm-image.tar docker://…` take the result.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options say what to build and where.
type Options struct {
	// Module is the directory of qm's module.
	Module string
	// Out is the image tarball to write.
	Out string
	// Ref names the image in the tarball, as docker load tags it.
	Ref string
	// Version and Revision go into the OCI labels.
	Version, Revision string
	// CABundle is copied to /etc/ssl/certs/ca-certificates.crt; empty: none.
	CABundle string
}

// User is the image's user: distroless' "nonroot", with no account file
// needed, as Kubernetes' runAsNonRoot checks a numeric user.
const User = "65532:65532"

// epoch dates every file and the image, so that the same qm gives the same
// image digest.
var epoch = time.Unix(0, 0).UTC()

func main() {
	var o Options
	flag.StringVar(&o.Module, "module", ".", "directory of qm's module")
	flag.StringVar(&o.Out, "out", "bin/qm-image.tar", "image tarball to write")
	flag.StringVar(&o.Ref, "ref", "ghcr.io/quartermaster/qm:dev", "image reference inside the tarball")
	flag.StringVar(&o.Version, "version", "dev", "version label")
	flag.StringVar(&o.Revision, "revision", "", "source revision label")
	flag.StringVar(&o.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to include (empty: none)")
	flag.Parse()
	if err := Build(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%s)\n", o.Out, o.Ref)
}

// Build compiles qm statically and writes its image.
func Build(o Options) error {
	ref, err := name.NewTag(o.Ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", o.Ref, err)
	}
	qm, err := compile(o.Module, o.Version, o.Revision)
	if err != nil {
		return err
	}
	files := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "qm", mode: 0o755, data: qm},
	}
	if o.CABundle != "" {
		ca, err := os.ReadFile(o.CABundle)
		if err != nil {
			return fmt.Errorf("reading the CA bundle: %w", err)
		}
		files = append(files, file{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		b, err := tarOf(files)
		return io.NopCloser(bytes.NewReader(b)), err
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return fmt.Errorf("creating the layer: %w", err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = "amd64", "linux", v1.Time{Time: epoch}
	cfg.Config = v1.Config{
		User:       User,
		Entrypoint: []string{"/qm"},
		WorkingDir: "/",
		Env:        []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "qm",
			"org.opencontainers.image.description": "Quartermaster: a Kubernetes service broker and registry on Temporal",
			"org.opencontainers.image.source":      "https://github.com/quartermaster/qm",
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.revision":    o.Revision,
			"org.opencontainers.image.licenses":    "Apache-2.0",
		},
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	return writeArchive(o.Out, ref, img)
}

// writeArchive writes img as an OCI image layout in a tar file (an
// "oci-archive", as skopeo, podman and docker load read it), named ref.
func writeArchive(out string, ref name.Tag, img v1.Image) error {
	dir, err := os.MkdirTemp("", "qm-image-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	})); err != nil {
		return fmt.Errorf("writing the image layout: %w", err)
	}
	var files []file
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			files = append(files, file{name: rel + "/", mode: 0o755, dir: true})
			return nil
		}
		data, err := os.ReadFile(path)
		files = append(files, file{name: rel, mode: 0o644, data: data})
		return err
	})
	if err != nil {
		return err
	}
	archive, err := tarOf(files)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, archive, 0o644)
}

// compile builds qm for linux/amd64 without cgo: a static binary that runs
// on an image with no libc, stamped with the version and revision of the
// image's labels, which `qm version` prints.
func compile(module, version, revision string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "qm-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "qm")
	ldflags := fmt.Sprintf("-s -w -X %[1]s.version=%[2]s -X %[1]s.revision=%[3]s", stampPackage, version, revision)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, ".")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building qm in %s: %w\n%s", module, err, stderr.String())
	}
	return os.ReadFile(out)
}

// stampPackage holds the variables `qm version` prints.
const stampPackage = "github.com/quartermaster/qm/internal/cli"

// file is an entry of the layer.
type file struct {
	name string
	mode int64
	dir  bool
	data []byte
}

// tarOf writes the layer: every entry owned by root, read-only to the
// image's user except /tmp.
func tarOf(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if f.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
