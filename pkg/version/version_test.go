package version

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestKubernetesMinor: the minor the releases carry is the one of the
// Kubernetes modules go.mod builds against (the staging modules are
// v0.<minor>.x, pinned by replace lines).
func TestKubernetesMinor(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*k8s\.io/apimachinery (?:=> k8s\.io/apimachinery )?v0\.(\d+)\.\d+`)
	found := re.FindAllStringSubmatch(string(mod), -1)
	if len(found) == 0 {
		t.Fatal("go.mod names no k8s.io/apimachinery version")
	}
	for _, m := range found {
		if m[1] != fmt.Sprint(KubernetesMinor) {
			t.Errorf("go.mod: %q, but KubernetesMinor is %d", strings.TrimSpace(m[0]), KubernetesMinor)
		}
	}
	if want := fmt.Sprintf("v0.%d.", KubernetesMinor); !strings.HasPrefix(Version, want) || !strings.Contains(String(), fmt.Sprintf("Kubernetes 1.%d", KubernetesMinor)) {
		t.Errorf("Version %q, String %q", Version, String())
	}
}
