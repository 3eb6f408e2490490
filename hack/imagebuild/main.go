// Command imagebuild writes nicaffinity's images (internal/images, the one
// recipe) as OCI archives, with no container engine or registry, and
// loads them into the engines it finds or pushes them. `make images` runs
// it; see the README's Deploy section.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/nicaffinity/nicaffinity/internal/images"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run() error {
	var b images.Build
	flag.StringVar(&b.BinDir, "bin-dir", "_output/images/bin", "the images' binaries, each named as its image")
	flag.StringVar(&b.LibcTar, "libc-tar", "", "Debian's libc6 as a tar of its files (dpkg-deb --fsys-tarfile)")
	flag.StringVar(&b.LibcVersion, "libc-version", "", "that package's version, for a label")
	flag.StringVar(&b.Version, "version", "", "the release (pkg/version)")
	flag.StringVar(&b.Revision, "revision", "", "the commit")
	created := flag.Int64("created", 0, "every timestamp, in seconds since 1970 (the commit's time: reproducible digests)")
	repo := flag.String("repo", "ghcr.io/nicaffinity", "the images' registry and path")
	tag := flag.String("tag", "", "the images' tag")
	out := flag.String("out", "_output/images", "where the archives go")
	only := flag.String("images", "", "comma-separated images to build; empty builds all")
	load := flag.String("load", "auto", "load into: auto (every engine found), none, or a comma-separated list of docker, podman, ctr")
	push := flag.Bool("push", false, "push to --repo with the local credentials instead of loading")
	flag.Parse()
	if *tag == "" || b.Version == "" {
		return errors.New("--tag and --version are required")
	}
	b.Created = time.Unix(*created, 0).UTC()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var written []string
	for _, img := range images.Shipped {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), img.Name) {
			continue
		}
		ref, err := name.NewTag(*repo + "/" + img.Name + ":" + *tag)
		if err != nil {
			return fmt.Errorf("image name %s/%s:%s: %w", *repo, img.Name, *tag, err)
		}
		i, err := b.Image(img)
		if err != nil {
			return err
		}
		if *push {
			if err := remote.Write(ref, i, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
				return fmt.Errorf("pushing %s: %w", ref, err)
			}
			fmt.Println("pushed", ref)
			continue
		}
		path := filepath.Join(*out, img.Name+".tar")
		if err := images.WriteArchive(path, ref, i); err != nil {
			return err
		}
		d, _ := i.Digest()
		fmt.Printf("%s %s (%s)\n", path, ref, d)
		written = append(written, path)
	}
	if *push || *load == "none" {
		return nil
	}
	return loadAll(*load, written)
}

// loadAll loads the archives into each engine asked for; auto loads into
// every one whose daemon answers and says which it did not find.
func loadAll(which string, archives []string) error {
	engines := map[string][]string{
		"docker": {"docker", "load", "-i"},
		"podman": {"podman", "load", "-i"},
		"ctr":    {"ctr", "-n", "k8s.io", "images", "import"},
	}
	probe := map[string][]string{
		"docker": {"docker", "info"},
		"podman": {"podman", "info"},
		"ctr":    {"ctr", "version"},
	}
	var names []string
	auto := which == "auto"
	if auto {
		names = []string{"docker", "podman", "ctr"}
	} else {
		names = strings.Split(which, ",")
	}
	loaded := 0
	for _, e := range names {
		cmd, ok := engines[e]
		if !ok {
			return fmt.Errorf("--load %s: not one of docker, podman, ctr", e)
		}
		if _, err := exec.LookPath(cmd[0]); err != nil || exec.Command(probe[e][0], probe[e][1:]...).Run() != nil {
			if !auto {
				return fmt.Errorf("--load %s: %s is not installed or its daemon does not answer", e, cmd[0])
			}
			continue
		}
		for _, a := range archives {
			c := exec.Command(cmd[0], append(cmd[1:], a)...)
			c.Stdout, c.Stderr = os.Stdout, os.Stderr
			if err := c.Run(); err != nil {
				return fmt.Errorf("%s: %w", strings.Join(c.Args, " "), err)
			}
		}
		loaded++
	}
	if auto && loaded == 0 {
		fmt.Println("no docker, podman or containerd answers here: the archives above are the images; load them with `ctr -n k8s.io images import`, `docker load -i` or `podman load -i`, or push them with `make images PUSH=1`")
	}
	return nil
}
