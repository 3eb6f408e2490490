package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// halfNICs is nrttest.HalfNICs as a Node: GPUs 0-3 have a NIC at PIX
// (mlx5_0 for 0-1, mlx5_1 for 2-3), GPUs 4-7 only at NODE.
func halfNICs(t *testing.T, free ...int) *Node {
	t.Helper()
	c, err := nrt.Compile(nrttest.HalfNICs("n", free...), "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	n := NodeOf(c)
	return &n
}

func rdmaReq(gpus int, level topology.Level) *Request {
	return &Request{GPUs: gpus, RDMA: true, MaxLevel: level, Required: true}
}

// TestFit: the verdict and the words users see, for each reason.
func TestFit(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	railed := rdmaReq(2, topology.LevelPXB)
	railed.Rails, railed.JobRails = annotations.PolicyRequired, []string{"r9"}
	for _, tc := range []struct {
		name string
		node *Node
		req  *Request
		want Verdict
	}{
		{"two aligned GPUs", halfNICs(t, all...), rdmaReq(2, topology.LevelPXB), Verdict{Fits: true}},
		{"four aligned, five asked", halfNICs(t, all...), rdmaReq(5, topology.LevelPXB),
			Verdict{Unresolvable: true, Reason: ReasonTooFew, Message: "only 4 of the 8 free GPUs have a NIC at PXB or closer; the pod needs 5"}},
		{"the aligned GPUs taken", halfNICs(t, 4, 5, 6, 7), rdmaReq(1, topology.LevelPIX),
			Verdict{Reason: ReasonNoAligned, Message: "none of the 4 free GPUs has a NIC at PIX or closer"}},
		{"at NODE every GPU counts", halfNICs(t, 4, 5, 6, 7), rdmaReq(4, topology.LevelNODE), Verdict{Fits: true}},
		{"VFs where no NIC has any", halfNICs(t, all...), &Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelPXB, Required: true, VFs: []VF{{Resource: "sriov", Count: 1}}},
			Verdict{Reason: ReasonNoVF, Message: "no free VF of sriov on a NIC at PXB or closer to 1 free GPUs"}},
		{"a job's rails the node does not have", halfNICs(t, all...), railed,
			Verdict{Reason: ReasonRails, Message: "not enough free GPUs at PXB or closer on the rails of the pod's job (r9; nicaffinity.io/rails: required)"}},
		{"no RDMA: free GPUs are enough", halfNICs(t, 4, 5), &Request{GPUs: 2}, Verdict{Fits: true}},
		{"no RDMA, too few free", halfNICs(t, 4), &Request{GPUs: 2}, Verdict{Reason: ReasonTooFew, Message: "only 1 free GPUs; the pod needs 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := MaxCallSteps
			if diff := cmp.Diff(tc.want, Fit(tc.node, tc.req, &steps)); diff != "" {
				t.Errorf("Fit (-want,+got):\n%s", diff)
			}
			if steps < 0 || steps > MaxCallSteps {
				t.Errorf("steps left %d", steps)
			}
		})
	}
}

// TestPlanAt: the plan a Reserve applies, decided from the node alone.
func TestPlanAt(t *testing.T) {
	n := halfNICs(t, 1, 2, 3, 4, 5, 6, 7)
	req := rdmaReq(2, topology.LevelPXB)
	steps := MaxCallSteps
	li := PlanLevel(n, req, &steps)
	if topology.Levels[li] != topology.LevelPIX {
		t.Fatalf("plan level %s, want PIX", topology.Levels[li])
	}
	p, ok := PlanAt(n, req, li, "n")
	if !ok {
		t.Fatal("no plan")
	}
	// GPU 1 is alone on its switch beside a taken GPU: it goes first, and
	// keeps the whole switch of GPUs 2-3 for a later pod.
	want := annotations.Allocation{Node: "n", GPUs: []string{"0000:20:00.0", "0000:30:00.0"}, NICs: []string{"mlx5_0", "mlx5_1"}, Level: "PIX"}
	if diff := cmp.Diff(want, p.Allocation); diff != "" {
		t.Errorf("allocation (-want,+got):\n%s", diff)
	}
	if _, ok := PlanAt(halfNICs(t, 7), rdmaReq(2, topology.LevelSYS), len(topology.Levels)-1, "n"); ok {
		t.Error("planned 2 GPUs where 1 is free")
	}
}

// TestCapacity: what a node could align emptied, whatever is free now; with
// a VF resource, next to the NICs that offer it (both here), even with none
// free, and next to one of them for a pod asking for one VF.
func TestCapacity(t *testing.T) {
	obj := nrttest.HalfNICs("n", 1, 5) // most GPUs taken: capacity ignores it
	for i, z := range obj.Zones {
		if z.Type == nrt.ZoneNIC {
			obj.Zones[i].Resources = append(obj.Zones[i].Resources, nrttest.Res("example.com/vf", 4, 0))
		}
	}
	c, err := nrt.Compile(obj, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	pix, node := LevelIndex(topology.LevelPIX), LevelIndex(topology.LevelNODE)
	got := map[string]int{
		"PIX":              Capacity(c, pix, "", false),
		"NODE":             Capacity(c, node, "", false),
		"PIX vf":           Capacity(c, pix, "example.com/vf", false),
		"NODE vf":          Capacity(c, node, "example.com/vf", false),
		"PIX vf, one NIC":  Capacity(c, pix, "example.com/vf", true),
		"NODE vf, one NIC": Capacity(c, node, "example.com/vf", true),
		"PIX absent":       Capacity(c, pix, "example.com/other", false),
	}
	want := map[string]int{"PIX": 4, "NODE": 8, "PIX vf": 4, "NODE vf": 8, "PIX vf, one NIC": 2, "NODE vf, one NIC": 8, "PIX absent": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capacity (-want,+got):\n%s", diff)
	}
}
