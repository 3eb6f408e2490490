package controlplane

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStart(t *testing.T) {
	cp := Start(t)
	list, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the NRT CRD is not served: %v", err)
	}
	if len(list.Items) != 0 {
		t.Errorf("fresh cluster has %d NRT objects", len(list.Items))
	}
	if _, err := cp.Kube.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("default namespace: %v", err)
	}
}

// TestStopLeavesNothing starts and stops a control plane and counts what is
// left: goroutines (after a grace period for closing connections) and the
// apiserver's temp dir.
func TestStopLeavesNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	var dir string
	t.Run("run", func(t *testing.T) {
		cp := Start(t)
		if _, err := cp.Kube.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		dir = cp.TmpDir
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("apiserver temp dir while running: %v", err)
		}
	})
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("temp dir %s left behind", dir)
	}
	var after int
	for i := 0; i < 50; i++ {
		after = runtime.NumGoroutine()
		if after <= before+10 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("goroutines: %d before, %d after", before, after)
	if after > before+10 {
		t.Errorf("%d goroutines before the control plane, %d after it stopped", before, after)
	}
}

// TestStartWaitsForPostStartHooks: New returns only once every post-start
// hook has finished. A hook still running when the server stops fails,
// and kube-apiserver exits the process over it. (healthz lists the hooks
// as well, so this holds the property, not the choice of readyz.)
func TestStartWaitsForPostStartHooks(t *testing.T) {
	cp := Start(t)
	body, err := cp.Kube.CoreV1().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("readyz: %v\n%s", err, body)
	}
	if !strings.Contains(string(body), "[+]poststarthook/start-service-ip-repair-controllers ok") {
		t.Errorf("readyz after Start:\n%s", body)
	}
}
