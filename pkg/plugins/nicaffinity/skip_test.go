//go:build !race

package nicaffinity

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// TestPreFilterSkipsFilter: PreFilter returns Skip exactly when every
// snapshot node with GPUs has a view on which Filter's verdict is
// NodeResourcesFit's, for the plugin's common RDMA request.
func TestPreFilterSkipsFilter(t *testing.T) {
	h100 := machineNRT(t, "h100", machines.HGXH100)
	h100b := machineNRT(t, "h100-b", machines.HGXH100, 0, 1, 2)
	unreadable := handNRT("bad", 0, 1)
	unreadable.Zones[6].Costs[0].Value = 77
	one := []string{rdma, "1"}
	tests := []struct {
		name  string
		args  func(*Args)
		objs  []*v1alpha2.NodeResourceTopology
		nodes []fwk.NodeInfo
		pod   podSpec
		// reserve: a reservation on node "h100-b" not yet in its object.
		reserve bool
		want    bool
	}{
		{name: "every GPU node aligned", objs: []*v1alpha2.NodeResourceTopology{h100, h100b},
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("h100-b", 8)}, pod: podSpec{gpus: 1, extra: one}, want: true},
		{name: "a node without GPUs and without an object", objs: []*v1alpha2.NodeResourceTopology{h100},
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("cpu", 0)}, pod: podSpec{gpus: 2, extra: one}, want: true},
		{name: "a GPU node without an object", objs: []*v1alpha2.NodeResourceTopology{h100},
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("new", 8)}, pod: podSpec{gpus: 1, extra: one}},
		{name: "a GPU node without an object, missingTopology Ignore", args: func(a *Args) { a.MissingTopology = MissingIgnore },
			objs: []*v1alpha2.NodeResourceTopology{h100}, nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("new", 8)}, pod: podSpec{gpus: 1, extra: one}, want: true},
		{name: "a free GPU without a NIC close enough", objs: []*v1alpha2.NodeResourceTopology{h100, handNRT("half", 3, 4)},
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("half", 8)}, pod: podSpec{gpus: 1, extra: one}},
		// Preemption could free the far GPUs in use.
		{name: "GPUs without a close NIC, all in use", objs: []*v1alpha2.NodeResourceTopology{h100, handNRT("half", 0, 3)},
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("half", 8)}, pod: podSpec{gpus: 1, extra: one}},
		{name: "an object that cannot be read", objs: []*v1alpha2.NodeResourceTopology{h100, unreadable},
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8)}, pod: podSpec{gpus: 1, extra: one}},
		{name: "reserved, staleTopology Reserve", objs: []*v1alpha2.NodeResourceTopology{h100, h100b}, reserve: true,
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("h100-b", 8)}, pod: podSpec{gpus: 1, extra: one}, want: true},
		{name: "reserved, staleTopology Reject", args: func(a *Args) { a.StaleTopology = StaleReject }, objs: []*v1alpha2.NodeResourceTopology{h100, h100b}, reserve: true,
			nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("h100-b", 8)}, pod: podSpec{gpus: 1, extra: one}},
		{name: "VFs", objs: []*v1alpha2.NodeResourceTopology{h100}, nodes: []fwk.NodeInfo{nodeInfo("h100", 8)},
			pod: podSpec{gpus: 1, extra: []string{"openshift.io/sriov_highnet", "1"}, ann: map[string]string{annotations.Policy: annotations.PolicyRequired}}},
		// Bounded, and no node offers its VFs: it does not wait
		// (unalignable.go), so Filter passes every node.
		{name: "VFs no node offers, bounded", objs: []*v1alpha2.NodeResourceTopology{h100}, nodes: []fwk.NodeInfo{nodeInfo("h100", 8)},
			pod: podSpec{gpus: 1, extra: []string{"openshift.io/sriov_highnet", "1"}}, want: true},
		{name: "a level of its own", objs: []*v1alpha2.NodeResourceTopology{h100}, nodes: []fwk.NodeInfo{nodeInfo("h100", 8)},
			pod: podSpec{gpus: 1, extra: one, ann: map[string]string{annotations.MaxLevel: "PIX"}}},
		// Filter passes every node for pods it does not constrain, a GPU
		// node without an object included.
		{name: "preferred", objs: []*v1alpha2.NodeResourceTopology{h100}, nodes: []fwk.NodeInfo{nodeInfo("h100", 8), nodeInfo("new", 8)},
			pod: podSpec{gpus: 1, extra: one, ann: map[string]string{annotations.Policy: "preferred"}}, want: true},
		{name: "no RDMA", objs: []*v1alpha2.NodeResourceTopology{h100, handNRT("half", 3, 4)}, nodes: []fwk.NodeInfo{nodeInfo("half", 8), nodeInfo("new", 8)},
			pod: podSpec{gpus: 1}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, c := newTestPlugin(t, tc.args, tc.objs...)
			if tc.reserve {
				c.Reserve("h100-b", "someone", nrt.GPUSet(1)<<5, nil)
			}
			pod := makePod("p", tc.pod.gpus, tc.pod.ann, tc.pod.extra...)
			cycle, st := preFilter(t, pl, pod, tc.nodes...)
			if got := st.IsSkip(); got != tc.want {
				t.Fatalf("PreFilter = %v, want Skip %v", st, tc.want)
			}
			if tc.want {
				s, err := getState(cycle)
				if err != nil || s == nil || !s.filterSkipped {
					t.Fatalf("state after a skip: %+v, %v; want the request kept, marked skipped", s, err)
				}
			}
		})
	}
}

// TestSkipSafeViewsAgreeWithCounts is the invariant Skip rests on: on a
// safe view, Filter passes a common RDMA request of g GPUs exactly when
// the view has g free GPUs, whichever GPUs are free (preemption frees
// any); and a view with a healthy GPU without a close NIC is not safe.
// Random free sets on every machine shape.
func TestSkipSafeViewsAgreeWithCounts(t *testing.T) {
	shapes := map[string]func(*machines.Tree){"hgx-h100": machines.HGXH100, "dgx-a100": machines.DGXA100,
		"half": machines.HalfNICs, "h20": machines.H20, "gb200": machines.GB200Tray, "b300": machines.HGXB300}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, build := range shapes {
		pl, c := newTestPlugin(t, nil, machineNRT(t, name, build))
		base := c.view(name)
		if base == nil || base.C == nil {
			t.Fatalf("%s: no usable view", name)
		}
		n := len(base.C.GPUs)
		safeSeen, unsafeSeen := 0, 0
		for range 200 {
			v := *base
			v.Free = nrt.GPUSet(rng.Uint64()) & base.C.Healthy
			v.answered = 0 // no precomputed answers: the search decides
			safe := c.skip.safe(&v)
			if safe {
				safeSeen++
			} else {
				unsafeSeen++
			}
			for g := 1; g <= n; g++ {
				req := pl.scoring.defaults
				req.GPUs, req.RDMA, req.Common = g, true, false
				steps := placement.MaxCallSteps
				passes := pl.filterView(&v, &req, &steps).IsSuccess()
				if safe && passes != (v.Free.Count() >= g) {
					t.Errorf("%s, free %b, %d GPUs: Filter passes %v on a safe view with %d free", name, v.Free, g, passes, v.Free.Count())
				}
			}
			if safe != (v.C.Healthy&^v.C.AnyNear[c.skip.li] == 0) {
				t.Errorf("%s, free %b: safe %v, but a healthy GPU without a close NIC is %v", name, v.Free, safe, !safe)
			}
		}
		t.Logf("%s: %d safe, %d not", name, safeSeen, unsafeSeen)
	}
}

// TestSkipFollowsTheCache: the memo of which nodes have views is trusted
// only while neither the node list nor the cache's nodes change, and the
// count of unsafe views follows views as they are published and removed.
func TestSkipFollowsTheCache(t *testing.T) {
	pl, c := newTestPlugin(t, nil, machineNRT(t, "a", machines.HGXH100))
	nodes := []fwk.NodeInfo{nodeInfo("a", 8), nodeInfo("b", 8)}
	pod := makePod("p", 1, nil, rdma, "1")
	skips := func() bool {
		_, st := preFilter(t, pl, pod, nodes...)
		return st.IsSkip()
	}
	if skips() {
		t.Fatal("skipped with node b (8 GPUs) without an object")
	}
	c.observe(machineNRT(t, "b", machines.HGXH100))
	if !skips() {
		t.Fatal("not skipped once b has an aligned object (same node list)")
	}
	c.observe(handNRT("b", 5))
	if skips() {
		t.Fatal("skipped with b's only free GPU far from every NIC")
	}
	c.observe(machineNRT(t, "b", machines.HGXH100))
	c.remove("a")
	if skips() {
		t.Fatal("skipped after a's object went")
	}
	if got := c.skip.unsafe.Load(); got != 0 {
		t.Errorf("unsafe views counted: %d, want 0", got)
	}
	// A new list of the same nodes is checked again, and a node whose
	// GPUs go from none to some makes the cache's epoch move.
	nodes = []fwk.NodeInfo{nodeInfo("b", 8), nodeInfo("c", 0)}
	if !skips() {
		t.Fatal("not skipped: b aligned, c has no GPUs")
	}
	nodes[1] = nodeInfo("c", 8)
	if !skips() {
		t.Fatal("the memo was dropped without a new list or epoch")
	}
	if !gpusChanged(nodeInfo("c", 0).Node(), nodes[1].Node(), "nvidia.com/gpu") {
		t.Fatal("gpusChanged: 0 to 8 GPUs not seen")
	}
	c.nodesChanged()
	if skips() {
		t.Fatal("skipped with c's 8 GPUs and no object for c")
	}
}

// TestReserveChecksASkippedFilter: a cycle that skipped Filter whose
// chosen node's view no longer fits the pod fails at Reserve with Filter's
// reason; that pod filters node by node from then on, until it is
// forgotten.
func TestReserveChecksASkippedFilter(t *testing.T) {
	pl, c := newTestPlugin(t, nil, machineNRT(t, "a", machines.HGXH100, 1, 2, 3, 4, 5, 6, 7))
	nodes := []fwk.NodeInfo{nodeInfo("a", 8)}
	pod := makePod("p", 1, nil, rdma, "1")
	cycle, st := preFilter(t, pl, pod, nodes...)
	if !st.IsSkip() {
		t.Fatalf("PreFilter = %v, want Skip", st)
	}
	// Another scheduler's pod took the last GPU; the object shows it.
	c.observe(machineNRT(t, "a", machines.HGXH100, 0, 1, 2, 3, 4, 5, 6, 7))
	got := pl.Reserve(t.Context(), cycle, pod, "a")
	if got.Code() != fwk.Unschedulable || !strings.Contains(got.Message(), "checked at Reserve") {
		t.Fatalf("Reserve = %v, want Unschedulable checked at Reserve", got)
	}
	c.observe(machineNRT(t, "a", machines.HGXH100, 1, 2, 3, 4, 5, 6, 7))
	if _, st := preFilter(t, pl, pod, nodes...); st.IsSkip() {
		t.Fatal("the raced pod skipped Filter again")
	}
	if _, st := preFilter(t, pl, makePod("q", 1, nil, rdma, "1"), nodes...); !st.IsSkip() {
		t.Fatal("another pod did not skip")
	}
	c.forgetPod(pod.UID)
	cycle, st = preFilter(t, pl, pod, nodes...)
	if !st.IsSkip() {
		t.Fatal("the forgotten pod does not skip")
	}
	if got := pl.Reserve(t.Context(), cycle, pod, "a"); !got.IsSuccess() {
		t.Fatalf("Reserve on a node that fits: %v", got)
	}
}
