package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/images"
	"github.com/nicaffinity/nicaffinity/pkg/version"
)

// TestImagesMatchManifests: every image the manifests run is one of the
// recipe's (internal/images), whose entrypoint is the container's command
// and whose user is the one the manifest runs it as; tags follow the
// release scheme; the exporter, which keeps cgo, gets a C library.
func TestImagesMatchManifests(t *testing.T) {
	type container struct {
		Image           string   `json:"image"`
		Command         []string `json:"command"`
		SecurityContext *struct {
			RunAsUser *int64 `json:"runAsUser"`
		} `json:"securityContext"`
	}
	type workload struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext *struct {
						RunAsUser *int64 `json:"runAsUser"`
					} `json:"securityContext"`
					Containers []container `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	files := []string{"scheduler.yaml", "exporter.yaml", "allocation-proxy/allocation-proxy.yaml"}
	seen := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(manifestsDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---") {
			var w workload
			if err := yaml.Unmarshal([]byte(doc), &w); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, c := range w.Spec.Template.Spec.Containers {
				repo, tag, _ := strings.Cut(c.Image, ":")
				if !strings.HasPrefix(repo, "ghcr.io/nicaffinity/") {
					continue
				}
				name := strings.TrimPrefix(repo, "ghcr.io/nicaffinity/")
				seen[name] = true
				if want := "v0." + strconv.Itoa(version.KubernetesMinor) + "."; !strings.HasPrefix(tag, want) {
					t.Errorf("%s: image %s: tag is not %s*", f, c.Image, want)
				}
				img, ok := images.Lookup(name)
				if !ok {
					t.Errorf("%s: image %s is not one internal/images builds", f, c.Image)
					continue
				}
				if len(c.Command) == 0 || c.Command[0] != img.Entrypoint() {
					t.Errorf("%s: %s runs %v, its image's entrypoint is %s", f, name, c.Command, img.Entrypoint())
				}
				var runAs *int64
				if sc := w.Spec.Template.Spec.SecurityContext; sc != nil {
					runAs = sc.RunAsUser
				}
				if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
					runAs = c.SecurityContext.RunAsUser
				}
				switch {
				case runAs != nil && *runAs != 0 && img.User != fmt.Sprintf("%d:%d", *runAs, *runAs):
					t.Errorf("%s: %s runs as %d, its image's user is %q", f, name, *runAs, img.User)
				case runAs != nil && *runAs == 0 && img.User != "":
					t.Errorf("%s: %s runs as root, its image's user is %q", f, name, img.User)
				}
				if name == "topology-exporter" && !img.CGO {
					t.Errorf("the exporter reaches NVML through cgo; its image must carry a C library")
				}
			}
		}
	}
	for _, i := range images.Shipped {
		if !seen[i.Name] {
			t.Errorf("image %s is built but no manifest runs it", i.Name)
		}
	}
}
