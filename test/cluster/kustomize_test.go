//go:build cluster

package cluster

import (
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nicaffinity/nicaffinity/internal/realcluster"
)

// TestClusterKustomize: `kubectl apply -k manifests/crds` and `-k
// manifests/` on a fresh cluster, as the README's kustomize path says,
// with only what this cluster needs changed in the rendered objects (the
// images' tag, no NVIDIA runtime class, the simulated sysfs): every pod
// runs and a pod of the nicaffinity scheduler gets a plan.
func TestClusterKustomize(t *testing.T) {
	e := startEnv(t)
	manifests, err := filepath.Abs(filepath.Join("..", "..", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.run("kubectl", "apply", "-k", filepath.Join(manifests, "crds")); err != nil {
		t.Fatalf("kubectl apply -k manifests/crds: %v\n%s", err, out)
	}
	rendered, err := e.run("kubectl", "kustomize", manifests)
	if err != nil {
		t.Fatalf("kubectl kustomize manifests/: %v\n%s", err, rendered)
	}
	for _, r := range []struct{ old, new string }{
		{`:v0\.37\.0\n`, ":" + e.tag + "\n"},
		{`(?m)^\s*runtimeClassName: nvidia\n`, ""},
		{`path: /sys\n`, "path: " + realcluster.MachineDir + "\n"},
	} {
		re := regexp.MustCompile(r.old)
		if !re.MatchString(rendered) {
			t.Fatalf("kubectl kustomize manifests/ renders no %q to change", r.old)
		}
		rendered = re.ReplaceAllLiteralString(rendered, r.new)
	}
	e.apply(rendered)
	e.apply(vendorManifest(true))
	e.waitPodsReady(vendorNS, len(e.c.Nodes), 3*time.Minute)
	e.waitPodsReady(nodeNS, len(e.c.Nodes), 3*time.Minute)
	e.waitPodsReady(schedNS, 2, 3*time.Minute)
	w := workload{name: "kustomized", gpus: 2, rdma: true}
	e.create(w)
	pod := e.waitRunning(w.name)
	if a, err := plan(pod); err != nil || len(a.GPUs) != 2 {
		t.Errorf("the pod's plan: %+v, %v", a, err)
	}
}
