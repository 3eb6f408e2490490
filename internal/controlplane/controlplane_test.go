package controlplane

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/storage/mvcc"
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

// TestCompactStorage: after a compaction, a read at a revision before it
// fails as compacted, and a second compaction at the same revision is no
// error (the apiserver's own may have come first).
func TestCompactStorage(t *testing.T) {
	cp := Start(t)
	ns := cp.Kube.CoreV1().Namespaces()
	first, err := ns.Get(t.Context(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		first.Labels = map[string]string{"round": strconv.Itoa(i)}
		if first, err = ns.Update(t.Context(), first, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	old := first.ResourceVersion
	first.Labels = map[string]string{"round": "last"}
	if _, err := ns.Update(t.Context(), first, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.CompactStorage(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := cp.CompactStorage(t.Context()); err != nil {
		t.Errorf("compacting again: %v", err)
	}
	// The apiserver may answer an old resourceVersion from its watch
	// cache, so ask etcd (a resourceVersion is etcd's revision).
	rev, err := strconv.ParseInt(old, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.etcd.KV().Range(t.Context(), []byte("/"), []byte("0"), mvcc.RangeOptions{Rev: rev}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Errorf("reading etcd at revision %d after the compaction: error %v, want %v", rev, err, mvcc.ErrCompacted)
	}
}
