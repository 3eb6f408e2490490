//go:build !race

package nicaffinity

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// TestPreemptionSeesFreedGPUs: on a half-NIC node whose only aligned GPUs
// (4-7) are held by pods, Filter refuses an aligned RDMA pod; in the
// what-if of removing the pod on GPUs 4 and 5 (its observation, or its
// plan, names them) it passes, and adding it back refuses again. The
// what-if lives in a clone of the cycle: the original is untouched.
func TestPreemptionSeesFreedGPUs(t *testing.T) {
	obj := machineNRT(t, "half", machines.HalfNICs, 4, 5, 6, 7)
	c, err := nrt.Compile(obj, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	planned := makePod("low-planned", 2, map[string]string{annotations.AllocationKey: annotations.Marshal(
		annotations.Allocation{Node: "half", GPUs: []string{c.GPUs[4].BusID, c.GPUs[5].BusID}})})
	observed := makePod("low-observed", 2, map[string]string{annotations.ObservedKey: annotations.Marshal(annotations.Observed{
		GPUs: []annotations.ObservedGPU{{BusID: c.GPUs[6].BusID}, {BusID: c.GPUs[7].BusID}}, Plan: "none"})})
	unknown := makePod("low-unknown", 2, nil)
	for _, tc := range []struct {
		name   string
		victim *v1.Pod
		frees  bool
	}{{"planned", planned, true}, {"observed", observed, true}, {"neither", unknown, false}} {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newTestPlugin(t, nil, obj)
			node := nodeInfo("half", 8)
			cycle, st := preFilter(t, pl, makePod("high", 1, nil, rdma, "1"), node)
			if !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			if got := pl.Filter(t.Context(), cycle, nil, node); got.IsSuccess() {
				t.Fatalf("Filter passes with no aligned GPU free")
			}
			victim, err := framework.NewPodInfo(tc.victim)
			if err != nil {
				t.Fatal(err)
			}
			whatIf := cycle.Clone()
			if st := pl.RemovePod(t.Context(), whatIf, nil, victim, node); !st.IsSuccess() {
				t.Fatalf("RemovePod: %v", st)
			}
			if got := pl.Filter(t.Context(), whatIf, nil, node); got.IsSuccess() != tc.frees {
				t.Errorf("Filter after removing the victim: %v, want success %v", got, tc.frees)
			}
			if got := pl.Filter(t.Context(), cycle, nil, node); got.IsSuccess() {
				t.Errorf("the original cycle saw the what-if")
			}
			if st := pl.AddPod(t.Context(), whatIf, nil, victim, node); !st.IsSuccess() {
				t.Fatalf("AddPod: %v", st)
			}
			if got := pl.Filter(t.Context(), whatIf, nil, node); got.IsSuccess() {
				t.Errorf("Filter passes after adding the victim back")
			}
		})
	}
}
