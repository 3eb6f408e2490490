package runenv

import (
	"context"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
)

var _ ktesting.TB = &Env{}

// TestControlPlaneOutsideTests starts the in-process control plane through an
// Env, as the simulator will, and checks Close leaves nothing behind.
func TestControlPlaneOutsideTests(t *testing.T) {
	env := New("check")
	var tmp string
	err := env.Run(func() {
		cp := controlplane.Start(env)
		tmp = cp.TmpDir
		if _, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().List(context.Background(), metav1.ListOptions{}); err != nil {
			env.Fatalf("NRT CRD not served: %v", err)
		}
	})
	env.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Errorf("apiserver temp dir %s left after Close", tmp)
	}
	fail := New("fatal")
	err = fail.Run(func() { fail.Fatalf("boom %d", 7) })
	fail.Close()
	if err == nil || !strings.Contains(err.Error(), "boom 7") {
		t.Errorf("Fatalf came back as %v", err)
	}
}
