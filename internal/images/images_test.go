package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// fakeBuild has a binary per shipped image and a small libc6 tar shaped
// as Debian's.
func fakeBuild(t *testing.T) Build {
	t.Helper()
	dir := t.TempDir()
	for _, i := range Shipped {
		if err := os.WriteFile(filepath.Join(dir, i.Name), []byte("binary "+i.Name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./lib/", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./lib/x86_64-linux-gnu/", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./lib/x86_64-linux-gnu/libc.so.6", Mode: 0o755}, "libc")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", Mode: 0o755}, "ld")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./lib/x86_64-linux-gnu/gconv/UTF-7.so", Mode: 0o644}, "gconv")
	add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "./lib64/ld-linux-x86-64.so.2", Linkname: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/share/doc/libc6/copyright", Mode: 0o644}, "GPL")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/share/doc/libc6/changelog.gz", Mode: 0o644}, "log")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/ldd", Mode: 0o755}, "ldd")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	libc := filepath.Join(dir, "libc6.tar")
	if err := os.WriteFile(libc, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return Build{BinDir: dir, LibcTar: libc, LibcVersion: "2.36-9+deb12u14", Version: "v0.37.1", Revision: "abc", Created: time.Unix(1700000000, 0).UTC(), Arch: "amd64"}
}

// files lists an image's flattened files: path -> mode, uid:gid and
// (for files) content or (for links) target.
func files(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(tr)
			v := ""
			switch h.Typeflag {
			case tar.TypeDir:
				v = "dir"
			case tar.TypeSymlink:
				v = "-> " + h.Linkname
			default:
				v = string(body)
			}
			out[h.Name] = v + " " + os.FileMode(h.Mode).String()
			if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
				t.Errorf("%s: owner %d:%d, time %v; want root and the build's time", h.Name, h.Uid, h.Gid, h.ModTime)
			}
		}
		rc.Close()
	}
	return out
}

// TestImages: each shipped image is its binary as entrypoint, the user the
// manifests run it as, the base files, Debian's libc (its libraries and
// loader, no tools or docs) only where the binary needs it, and labels.
func TestImages(t *testing.T) {
	b := fakeBuild(t)
	base := map[string]string{
		"etc/":       "dir -rwxr-xr-x",
		"etc/passwd": Passwd + " -rw-r--r--",
		"etc/group":  Group + " -rw-r--r--",
		"tmp/":       "dir -rwxrwxrwx",
	}
	libc := map[string]string{
		"lib/":                           "dir -rwxr-xr-x",
		"lib/x86_64-linux-gnu/":          "dir -rwxr-xr-x",
		"lib/x86_64-linux-gnu/libc.so.6": "libc -rwxr-xr-x",
		"lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": "ld -rwxr-xr-x",
		"lib64/":                        "dir -rwxr-xr-x",
		"lib64/ld-linux-x86-64.so.2":    "-> /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 ----------",
		"usr/":                          "dir -rwxr-xr-x",
		"usr/share/":                    "dir -rwxr-xr-x",
		"usr/share/doc/":                "dir -rwxr-xr-x",
		"usr/share/doc/libc6/":          "dir -rwxr-xr-x",
		"usr/share/doc/libc6/copyright": "GPL -rw-r--r--",
	}
	for _, want := range []struct {
		name, user string
		libc       bool
	}{
		{"scheduler", "65532:65532", false},
		{"topology-exporter", "", true},
		{"allocation-proxy", "", false},
	} {
		t.Run(want.name, func(t *testing.T) {
			i, _ := Lookup(want.name)
			img, err := b.Image(i)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"/" + want.name}, cf.Config.Entrypoint); diff != "" {
				t.Errorf("entrypoint (-want,+got):\n%s", diff)
			}
			if cf.Config.User != want.user || cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(b.Created) {
				t.Errorf("user %q os %s arch %s created %v; want user %q, linux/amd64, the build's time", cf.Config.User, cf.OS, cf.Architecture, cf.Created, want.user)
			}
			if cf.Config.Labels["org.opencontainers.image.version"] != "v0.37.1" || cf.Config.Labels["org.opencontainers.image.title"] != want.name {
				t.Errorf("labels %v", cf.Config.Labels)
			}
			wantFiles := map[string]string{want.name: "binary " + want.name + " -rwxr-xr-x"}
			for k, v := range base {
				wantFiles[k] = v
			}
			if want.libc {
				for k, v := range libc {
					wantFiles[k] = v
				}
				if cf.Config.Labels["io.nicaffinity.libc6"] != "2.36-9+deb12u14" {
					t.Errorf("no libc6 version label: %v", cf.Config.Labels)
				}
			}
			if diff := cmp.Diff(wantFiles, files(t, img)); diff != "" {
				t.Errorf("files (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestImagesReproducible: the same inputs give the same digest, and an
// archive written and read back is the same image under its name.
func TestImagesReproducible(t *testing.T) {
	b := fakeBuild(t)
	i, _ := Lookup("topology-exporter")
	one, err := b.Image(i)
	if err != nil {
		t.Fatal(err)
	}
	two, err := b.Image(i)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := one.Digest()
	d2, _ := two.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: %s and %s", d1, d2)
	}
	ref, _ := name.NewTag("ghcr.io/nicaffinity/topology-exporter:v0.37.1")
	path := filepath.Join(t.TempDir(), "x.tar")
	if err := WriteArchive(path, ref, one); err != nil {
		t.Fatal(err)
	}
	back, named, err := ReadArchive(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d3, _ := back.Digest()
	if d3 != d1 || named != ref.Name() {
		t.Errorf("read back %s named %q; want %s named %q", d3, named, d1, ref.Name())
	}
}

// TestImagesBadInput: a missing binary, a binary that cannot run, and a
// libc tar that is not libc6's are refused with errors that name them.
func TestImagesBadInput(t *testing.T) {
	b := fakeBuild(t)
	exp, _ := Lookup("topology-exporter")
	sched, _ := Lookup("scheduler")
	if err := os.Chmod(filepath.Join(b.BinDir, "scheduler"), 0o644); err != nil {
		t.Fatal(err)
	}
	notLibc := filepath.Join(t.TempDir(), "not.tar")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/true", Mode: 0o755})
	_ = tw.Close()
	if err := os.WriteFile(notLibc, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		build func(Build) Build
		img   Image
		want  string
	}{
		{"no binary", func(b Build) Build { b.BinDir = t.TempDir(); return b }, exp, "topology-exporter"},
		{"not executable", func(b Build) Build { return b }, sched, "not an executable"},
		{"no libc given", func(b Build) Build { b.LibcTar = ""; return b }, exp, "C library"},
		{"not libc6", func(b Build) Build { b.LibcTar = notLibc; return b }, exp, "no libc.so"},
		{"libc missing", func(b Build) Build { b.LibcTar = notLibc + ".gone"; return b }, exp, "libc6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.build(b).Image(c.img)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
				t.Errorf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}
