package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/version"
)

// TestImagesMatchManifests: every image the manifests run has a Dockerfile
// whose entrypoint is the container's command and whose user is the one
// the manifest runs it as; tags follow the release scheme; the scheduler
// and the proxy build without cgo, the exporter with it on a base that has
// a C library.
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
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]`)
	user := regexp.MustCompile(`(?m)^USER (\d+)`)
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`)
	seen := 0
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
				seen++
				name := strings.TrimPrefix(repo, "ghcr.io/nicaffinity/")
				if want := "v0." + strconv.Itoa(version.KubernetesMinor) + "."; !strings.HasPrefix(tag, want) {
					t.Errorf("%s: image %s: tag is not %s*", f, c.Image, want)
				}
				df, err := os.ReadFile(filepath.Join("..", "..", "images", name+".Dockerfile"))
				if err != nil {
					t.Errorf("%s: image %s has no Dockerfile: %v", f, c.Image, err)
					continue
				}
				m := entry.FindStringSubmatch(string(df))
				if m == nil || len(c.Command) == 0 || c.Command[0] != m[1] {
					t.Errorf("%s: %s runs %v, its Dockerfile's ENTRYPOINT is %v", f, name, c.Command, m)
				}
				var runAs *int64
				if sc := w.Spec.Template.Spec.SecurityContext; sc != nil {
					runAs = sc.RunAsUser
				}
				if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
					runAs = c.SecurityContext.RunAsUser
				}
				u := user.FindStringSubmatch(string(df))
				switch {
				case runAs != nil && *runAs != 0 && (u == nil || u[1] != strconv.FormatInt(*runAs, 10)):
					t.Errorf("%s: %s runs as %d, its Dockerfile's USER is %v", f, name, *runAs, u)
				case runAs != nil && *runAs == 0 && u != nil:
					t.Errorf("%s: %s runs as root, its Dockerfile sets USER %s", f, name, u[1])
				}
				all := froms.FindAllStringSubmatch(string(df), -1)
				final := all[len(all)-1][1]
				cgo := strings.Contains(string(df), "CGO_ENABLED=1")
				switch {
				case cgo && !strings.Contains(final, "distroless/base"):
					t.Errorf("%s: built with cgo on %s, which has no C library", name, final)
				case !cgo && (!strings.Contains(string(df), "CGO_ENABLED=0") || !strings.Contains(final, "distroless/static")):
					t.Errorf("%s: a static build belongs on distroless static, without cgo (final %s)", name, final)
				}
			}
		}
	}
	if seen != 3 {
		t.Errorf("found %d nicaffinity containers in the manifests, want 3", seen)
	}
}
