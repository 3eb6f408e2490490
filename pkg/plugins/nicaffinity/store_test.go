package nicaffinity

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestStoreKnowsNoInformers: the store (cache.go) takes plain values; the
// informers, the CRD wait, pods and plans stay in its edge
// (informers.go). A store that imports client-go, pod types or the plan
// annotation has grown an edge again.
func TestStoreKnowsNoInformers(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "cache.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		for _, banned := range []string{"k8s.io/client-go", "k8s.io/api/core/v1", "k8s.io/kube-scheduler", "github.com/nicaffinity/nicaffinity/pkg/annotations"} {
			if strings.HasPrefix(path, banned) {
				t.Errorf("cache.go imports %s", path)
			}
		}
	}
}
