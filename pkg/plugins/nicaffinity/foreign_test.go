//go:build !race

package nicaffinity

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// TestForeignPodsWait: a pod another scheduler bound with GPUs that the
// node's object does not count yet holds required RDMA pods off the node
// (which GPUs it gets is unknown), until an object counts it, it goes, or
// the reservation timeout passes.
func TestForeignPodsWait(t *testing.T) {
	pl, c := newTestPlugin(t, nil, handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7))
	now := time.Now()
	c.now = func() time.Time { return now }
	pod := makePod("p", 2, nil, rdma, "1")
	filter := func() *fwk.Status {
		t.Helper()
		cycle, st := preFilter(t, pl, pod, nodeInfo("n", 8))
		if !st.IsSuccess() && !st.IsSkip() {
			t.Fatalf("PreFilter: %v", st)
		}
		return pl.Filter(t.Context(), cycle, pod, nodeInfo("n", 8))
	}
	if st := filter(); !st.IsSuccess() {
		t.Fatalf("before: %v", st)
	}
	c.awaitForeign("n", "x", "team/other")
	if st := filter(); st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "team/other") {
		t.Errorf("with another scheduler's pod uncounted: %v, want Unschedulable naming it", st)
	}
	comp, err := nrt.Compile(handNRT("n", 2, 3, 4, 5, 6, 7), "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	c.set("n", "2", comp, nil, map[types.UID]bool{"x": true})
	if st := filter(); !st.IsSuccess() {
		t.Errorf("once an object counts it: %v", st)
	}
	c.awaitForeign("n", "y", "team/gone")
	c.forgetForeign("n", "y")
	if st := filter(); !st.IsSuccess() {
		t.Errorf("once it went: %v", st)
	}
	c.awaitForeign("n", "z", "team/never")
	now = now.Add(3 * time.Minute)
	c.expireDue()
	if st := filter(); !st.IsSuccess() {
		t.Errorf("after the reservation timeout: %v", st)
	}
}
