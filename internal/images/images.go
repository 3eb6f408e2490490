// Package images is the one recipe for nicaffinity's container images: the
// images `make images` writes here, with no container engine or registry,
// and the ones a release publishes are the same images, built by this
// package from the binaries `make build-images` makes.
//
// An image is at most three layers on nothing (FROM scratch):
//
//   - a base: /etc/passwd and /etc/group naming root and nonroot (65532),
//     and /tmp, as distroless has them;
//   - for a binary built with cgo, Debian's libc6 (the C library and its
//     loader), taken from Debian's package, never from the build host's
//     files, so the image does not depend on the machine that built it;
//   - the binary at /<name>, the entrypoint.
//
// Every timestamp is the build's fixed Created time, so the same binaries
// give the same image digests.
package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is one image of the recipe.
type Image struct {
	// Name is the image's repository name under the registry and the
	// binary's name (bin/<Name>, /<Name> in the image).
	Name string
	// User is the image's default user ("65532:65532"); empty is root.
	// The manifests' securityContext agrees (test/manifests).
	User string
	// CGO says the binary is linked against glibc, so the image carries
	// Debian's libc6.
	CGO bool
	// Description is the image's org.opencontainers.image.description.
	Description string
}

// Entrypoint is the image's entrypoint: its one binary.
func (i Image) Entrypoint() string { return "/" + i.Name }

// NonRoot is the distroless nonroot user.
const NonRoot = "65532:65532"

// Shipped are the images the chart and the manifests run. The scheduler
// runs as nonroot; the exporter and the allocation proxy as root, since
// the kubelet's sockets they use are root's. The exporter keeps cgo:
// go-nvml reaches NVML through dlopen("libnvidia-ml.so.1"), which the
// NVIDIA container runtime mounts from the host's driver, so the image
// needs a C library and a loader but no NVIDIA library of its own.
var Shipped = []Image{
	{Name: "scheduler", User: NonRoot, Description: "kube-scheduler with the NICAffinity plugin"},
	{Name: "topology-exporter", CGO: true, Description: "publishes a GPU node's PCIe topology as a NodeResourceTopology"},
	{Name: "allocation-proxy", Description: "hands the kubelet the devices the scheduler planned, between it and the vendor device plugins"},
}

// Lookup finds a shipped image by name.
func Lookup(name string) (Image, bool) {
	for _, i := range Shipped {
		if i.Name == name {
			return i, true
		}
	}
	return Image{}, false
}

// Build is what one build of the images shares.
type Build struct {
	// BinDir holds the binaries, one per image, named as the image.
	BinDir string
	// LibcTar is Debian's libc6 package as a plain tar of its files
	// (dpkg-deb --fsys-tarfile libc6_*.deb); needed by CGO images.
	LibcTar string
	// LibcVersion is that package's version, recorded in a label.
	LibcVersion string
	// Version is the release (pkg/version), Revision the commit.
	Version, Revision string
	// Created is every file's and the image's time.
	Created time.Time
	// Arch is the images' architecture; empty is this machine's.
	Arch string
}

// Labels are every image's OCI annotations.
func (b Build) Labels(i Image) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       i.Name,
		"org.opencontainers.image.description": i.Description,
		"org.opencontainers.image.version":     b.Version,
		"org.opencontainers.image.revision":    b.Revision,
		"org.opencontainers.image.source":      "https://github.com/nicaffinity/nicaffinity",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	if i.CGO {
		l["io.nicaffinity.libc6"] = b.LibcVersion
	}
	return l
}

// Image builds one image.
func (b Build) Image(i Image) (v1.Image, error) {
	bin := filepath.Join(b.BinDir, i.Name)
	st, err := os.Stat(bin)
	if err != nil {
		return nil, fmt.Errorf("image %s: its binary: %w (make build-images builds it)", i.Name, err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("image %s: %s is not an executable file", i.Name, bin)
	}
	layers := []layerFunc{b.baseLayer}
	if i.CGO {
		if b.LibcTar == "" {
			return nil, fmt.Errorf("image %s: its binary needs a C library: give Debian's libc6 as a tar (LibcTar)", i.Name)
		}
		layers = append(layers, b.libcLayer)
	}
	layers = append(layers, func() ([]byte, error) { return b.binaryLayer(bin, i.Name) })
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, mk := range layers {
		raw, err := mk()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", i.Name, err)
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", i.Name, err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: b.Created}, CreatedBy: "nicaffinity internal/images"}}); err != nil {
			return nil, fmt.Errorf("image %s: %w", i.Name, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = b.arch()
	cf.OS = "linux"
	cf.Created = v1.Time{Time: b.Created}
	cf.Config.Entrypoint = []string{i.Entrypoint()}
	cf.Config.User = i.User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = b.Labels(i)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, b.Labels(i)).(v1.Image), nil
}

func (b Build) arch() string {
	if b.Arch != "" {
		return b.Arch
	}
	return runtime.GOARCH
}

type layerFunc func() ([]byte, error)

// layerWriter writes a layer's tar with the build's times and root owner.
type layerWriter struct {
	buf  bytes.Buffer
	tw   *tar.Writer
	time time.Time
}

func (b Build) newLayer() *layerWriter {
	w := &layerWriter{time: b.Created}
	w.tw = tar.NewWriter(&w.buf)
	return w
}

func (w *layerWriter) dir(name string, mode int64) error {
	return w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: w.time, Format: tar.FormatPAX})
}

func (w *layerWriter) file(name string, mode int64, data []byte) error {
	if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: w.time, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := w.tw.Write(data)
	return err
}

func (w *layerWriter) close() ([]byte, error) {
	if err := w.tw.Close(); err != nil {
		return nil, err
	}
	return w.buf.Bytes(), nil
}

// Passwd and Group are the base layer's user database: distroless's root
// and nonroot.
const (
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	Group  = "root:x:0:\nnonroot:x:65532:\n"
)

func (b Build) baseLayer() ([]byte, error) {
	w := b.newLayer()
	for _, step := range []func() error{
		func() error { return w.dir("etc", 0o755) },
		func() error { return w.file("etc/passwd", 0o644, []byte(Passwd)) },
		func() error { return w.file("etc/group", 0o644, []byte(Group)) },
		func() error { return w.dir("tmp", 0o1777) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return w.close()
}

func (b Build) binaryLayer(bin, name string) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	w := b.newLayer()
	if err := w.file(name, 0o755, data); err != nil {
		return nil, err
	}
	return w.close()
}

// maxLibc bounds what is read of the libc6 tar: the package is about 13
// MB unpacked.
const maxLibc = 256 << 20

// libcLayer keeps of Debian's libc6 what a dynamically linked binary
// needs at run time: the shared libraries and the loader under lib/ and
// lib64/ (bookworm's package paths), and the package's copyright file.
// Documentation, locales' tools and gconv modules are left out.
func (b Build) libcLayer() ([]byte, error) {
	f, err := os.Open(b.LibcTar)
	if err != nil {
		return nil, fmt.Errorf("Debian's libc6: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(io.LimitReader(f, maxLibc))
	w := b.newLayer()
	dirs := map[string]bool{}
	var libs, loader int
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("Debian's libc6 tar %s: %w", b.LibcTar, err)
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		if !keepLibc(name) || h.Typeflag == tar.TypeDir {
			continue
		}
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
		if strings.Contains(name, "ld-linux") {
			loader++
		}
		if strings.Contains(path.Base(name), "libc.so") {
			libs++
		}
		hdr := &tar.Header{Name: name, Mode: h.Mode, ModTime: b.Created, Format: tar.FormatPAX}
		switch h.Typeflag {
		case tar.TypeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, h.Linkname
			if err := w.tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			hdr.Typeflag, hdr.Size = tar.TypeReg, h.Size
			if err := w.tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			if _, err := io.Copy(w.tw, tr); err != nil {
				return nil, err
			}
		}
	}
	if libs == 0 || loader == 0 {
		return nil, fmt.Errorf("Debian's libc6 tar %s has no libc.so or no ld-linux loader: is it libc6's dpkg-deb --fsys-tarfile?", b.LibcTar)
	}
	// Directories first, as a layer's readers expect: write them into a
	// fresh layer ahead of the files.
	files, err := w.close()
	if err != nil {
		return nil, err
	}
	out := b.newLayer()
	for _, d := range sortedDirs(dirs) {
		if err := out.dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	tr = tar.NewReader(bytes.NewReader(files))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := out.tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(out.tw, tr); err != nil {
			return nil, err
		}
	}
	return out.close()
}

func keepLibc(name string) bool {
	switch {
	case name == "usr/share/doc/libc6/copyright":
		return true
	case strings.HasPrefix(name, "lib64/"):
		return true
	case strings.HasPrefix(name, "lib/") && !strings.Contains(name, "/gconv/") && strings.Contains(path.Base(name), ".so"):
		return true
	}
	return false
}

// sortedDirs lists parents before children.
func sortedDirs(dirs map[string]bool) []string {
	out := make([]string, 0, len(dirs))
	for d := range dirs {
		out = append(out, d)
	}
	// A parent is a prefix of its children, so lexical order puts it first.
	slices.Sort(out)
	return out
}
