//go:build !race

package nicaffinity

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	discoveryfake "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

func TestPreFilter(t *testing.T) {
	pl, _ := newTestPlugin(t, nil)
	nodes := []fwk.NodeInfo{nodeInfo("a", 8), nodeInfo("b", 4)}
	tests := []struct {
		name     string
		pod      podSpec
		wantCode fwk.Code
		wantMsg  string
	}{
		{"no GPU", podSpec{gpus: 0}, fwk.Skip, ""},
		{"every GPU of the largest node, no RDMA", podSpec{gpus: 8}, fwk.Skip, ""},
		{"every GPU of the largest node with RDMA", podSpec{gpus: 8, extra: []string{rdma, "1"}}, fwk.Success, ""},
		{"two GPUs with RDMA", podSpec{gpus: 2, extra: []string{rdma, "1"}}, fwk.Success, ""},
		{"bad max-level", podSpec{gpus: 2, ann: map[string]string{annotations.MaxLevel: "near"}}, fwk.UnschedulableAndUnresolvable, "nicaffinity.io/max-level"},
		{"bad policy", podSpec{gpus: 2, ann: map[string]string{annotations.Policy: "maybe"}}, fwk.UnschedulableAndUnresolvable, "nicaffinity.io/policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, st := preFilter(t, pl, makePod("p", tc.pod.gpus, tc.pod.ann, tc.pod.extra...), nodes...)
			if st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantMsg) {
				t.Errorf("status %v %q, want %v containing %q", st.Code(), st.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// TestPreFilterSkipsDRAPods: a pod whose GPUs and NICs come through DRA
// ResourceClaims asks for no device-plugin GPU: the DynamicResources plugin
// chooses its devices, and NICAffinity steps aside even when the pod says
// it uses RDMA. (What its claims hold, the exporter counts as used in the
// node's object, so device-plugin pods never get it: pkg/nrt.Input.Claimed.)
func TestPreFilterSkipsDRAPods(t *testing.T) {
	pl, _ := newTestPlugin(t, nil)
	pod := makePod("dra", 0, map[string]string{annotations.RDMA: "true"})
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpus-with-nics", ResourceClaimTemplateName: ptr.To("gpus-with-nics")}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpus-with-nics"}}
	if _, st := preFilter(t, pl, pod, nodeInfo("a", 8)); st.Code() != fwk.Skip {
		t.Errorf("PreFilter on a DRA pod = %v, want Skip", st)
	}
}

type podSpec struct {
	gpus  int64
	ann   map[string]string
	extra []string
}

func TestFilter(t *testing.T) {
	h100 := machineNRT(t, "h100", machines.HGXH100)
	dgx := machineNRT(t, "dgx-a100", machines.DGXA100)
	tests := []struct {
		name     string
		objs     []*v1alpha2.NodeResourceTopology
		args     func(*Args)
		node     string
		pod      podSpec
		wantCode fwk.Code
		wantMsg  string
	}{
		{name: "aligned GPUs free", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 0, 1, 4, 5)}, node: "n",
			pod: podSpec{gpus: 2, extra: []string{rdma, "1"}}},
		{name: "NIC-bearing switches full, NIC-less ones free", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 4, 5, 6, 7)}, node: "n",
			pod: podSpec{gpus: 2, extra: []string{rdma, "1"}}, wantCode: fwk.Unschedulable, wantMsg: "none of the 4 free GPUs has a NIC at PXB or closer"},
		{name: "one aligned GPU free, pod needs two", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 3, 4, 5)}, node: "n",
			pod: podSpec{gpus: 2, extra: []string{rdma, "1"}}, wantCode: fwk.Unschedulable, wantMsg: "only 1 of the 3 free GPUs have a NIC at PXB or closer; the pod needs 2"},
		{name: "more GPUs than the node can ever align", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7)}, node: "n",
			pod: podSpec{gpus: 5, extra: []string{rdma, "1"}}, wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "only 4 of the 8 free GPUs have a NIC at PXB or closer; the pod needs 5"},
		{name: "NODE level accepted by annotation", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 4, 5)}, node: "n",
			pod: podSpec{gpus: 2, extra: []string{rdma, "1"}, ann: map[string]string{annotations.MaxLevel: "NODE"}}},
		{name: "preferred never filters", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 4, 5)}, node: "n",
			pod: podSpec{gpus: 2, extra: []string{rdma, "1"}, ann: map[string]string{annotations.Policy: "preferred"}}},
		{name: "no RDMA, no constraint", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 6, 7)}, node: "n", pod: podSpec{gpus: 2}},
		{name: "rdma annotation counts as RDMA", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 6, 7)}, node: "n",
			pod: podSpec{gpus: 2, ann: map[string]string{annotations.RDMA: "true"}}, wantCode: fwk.Unschedulable, wantMsg: "has a NIC"},
		{name: "required PIX on a DGX A100 (PXB only)", objs: []*v1alpha2.NodeResourceTopology{dgx}, node: "dgx-a100",
			pod: podSpec{gpus: 1, extra: []string{rdma, "1"}, ann: map[string]string{annotations.MaxLevel: "PIX"}}, wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "none of the 8 free GPUs has a NIC at PIX or closer"},
		{name: "required PIX on an HGX H100", objs: []*v1alpha2.NodeResourceTopology{h100}, node: "h100",
			pod: podSpec{gpus: 3, extra: []string{rdma, "1"}, ann: map[string]string{annotations.MaxLevel: "PIX"}}},
		{name: "missing object", node: "nowhere", pod: podSpec{gpus: 1, extra: []string{rdma, "1"}},
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "no NodeResourceTopology for this node"},
		{name: "missing object, policy Ignore", node: "nowhere", args: func(a *Args) { a.MissingTopology = MissingIgnore }, pod: podSpec{gpus: 1, extra: []string{rdma, "1"}}},
		{name: "malformed object", objs: []*v1alpha2.NodeResourceTopology{func() *v1alpha2.NodeResourceTopology {
			o := handNRT("bad", 0, 1)
			o.Zones[6].Costs[0].Value = 77
			return o
		}()}, node: "bad", pod: podSpec{gpus: 1, extra: []string{rdma, "1"}},
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "NodeResourceTopology cannot be read: GPU zone gpu-1: cost 77"},
		{name: "object written by another updater", objs: []*v1alpha2.NodeResourceTopology{func() *v1alpha2.NodeResourceTopology {
			o := &v1alpha2.NodeResourceTopology{ObjectMeta: metav1.ObjectMeta{Name: "nfd", ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "node-feature-discovery-topology-updater", Operation: metav1.ManagedFieldsOperationApply}}}}
			o.Zones = v1alpha2.ZoneList{{Name: "node-0", Type: "Node"}}
			return o
		}()}, node: "nfd", pod: podSpec{gpus: 1, extra: []string{rdma, "1"}},
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: `NodeResourceTopology cannot be read: written by "node-feature-discovery-topology-updater", not by nicaffinity's exporter`},
		{name: "whole node without RDMA left alone", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7)}, node: "n",
			pod: podSpec{gpus: 8}},
		{name: "whole node with RDMA: every GPU needs its NIC", objs: []*v1alpha2.NodeResourceTopology{handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7)}, node: "n",
			pod: podSpec{gpus: 8, extra: []string{rdma, "1"}}, wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "only 4 of the 8 free GPUs have a NIC at PXB or closer; the pod needs 8"},
		{name: "whole node with RDMA on a NIC per GPU", objs: []*v1alpha2.NodeResourceTopology{h100}, node: "h100",
			pod: podSpec{gpus: 8, extra: []string{rdma, "1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newTestPlugin(t, tc.args, tc.objs...)
			cycle, st := preFilter(t, pl, makePod("p", tc.pod.gpus, tc.pod.ann, tc.pod.extra...), nodeInfo("big", 16))
			// A skip promises that Filter passes every node.
			if st.IsSkip() && tc.wantCode != fwk.Success {
				t.Fatalf("PreFilter skipped Filter, which wants %v", tc.wantCode)
			}
			if !st.IsSuccess() && !st.IsSkip() {
				t.Fatalf("PreFilter: %v", st)
			}
			got := pl.Filter(t.Context(), cycle, nil, nodeInfo(tc.node, 8))
			if got.Code() != tc.wantCode || !strings.Contains(got.Message(), tc.wantMsg) {
				t.Errorf("Filter = %v %q, want %v containing %q", got.Code(), got.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// sriovNRT: the H20 fixture with VFs on mlx5_0 (next to GPUs 0,1) and mlx5_6
// (next to GPUs 6,7), as the exporter publishes them.
func sriovNRT(t *testing.T, freeVFs0, freeVFs6 int) *v1alpha2.NodeResourceTopology {
	return sriovNRTFor(t, freeVFs0, freeVFs6)
}

func sriovNRTFor(t testing.TB, freeVFs0, freeVFs6 int) *v1alpha2.NodeResourceTopology {
	tree := machines.New(t.TempDir())
	machines.H20(tree)
	const res = "openshift.io/sriov_highnet"
	var extra []devices.Device
	used := devices.Pod{Namespace: "o", Name: "vf-holder"}
	for _, pf := range []struct {
		path, bus  string
		free, numa int
	}{
		{"pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:08.0/0000:18:00", "0000:18:00", freeVFs0, 0},
		{"pci0000:b0/0000:b0:01.0/0000:b1:00.0/0000:b2:08.0/0000:b8:00", "0000:b8:00", freeVFs6, 1},
	} {
		var vfs []string
		for f := 2; f < 4; f++ {
			vf := pf.path + "." + string(rune('0'+f))
			tree.PCI(vf, machines.Func{Vendor: machines.VendorMellanox, Device: 0x101e, Class: machines.ClassEther, NUMA: pf.numa})
			vfs = append(vfs, vf)
			d := devices.Device{Resource: res, ID: pf.bus + "." + string(rune('0'+f))}
			extra = append(extra, d)
			if f-2 >= pf.free {
				used.Devices = append(used.Devices, d)
			}
		}
		tree.SRIOV(pf.path+".0", 8, vfs...)
	}
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
	if err != nil {
		t.Fatal(err)
	}
	snap := devices.Snapshot{Allocatable: extra, Pods: []devices.Pod{used}}
	for _, g := range topo.GPUs {
		snap.Allocatable = append(snap.Allocatable, devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address})
	}
	obj, _ := nrt.Build(nrt.Input{Node: "h20", Topology: topo, Snapshot: snap, Resources: nrt.DefaultResources()})
	return obj
}

func TestFilterSRIOV(t *testing.T) {
	const res = "openshift.io/sriov_highnet"
	tests := []struct {
		name         string
		free0, free6 int
		gpus         int64
		vfs          string
		wantCode     fwk.Code
		wantMsg      string
	}{
		{name: "free VFs next to free GPUs", free0: 2, free6: 2, gpus: 2, vfs: "1"},
		{name: "VFs next to GPUs 0,1 exhausted, 6,7 still there", free0: 0, free6: 1, gpus: 2, vfs: "1"},
		{name: "all VFs exhausted", free0: 0, free6: 0, gpus: 1, vfs: "1", wantCode: fwk.Unschedulable, wantMsg: "no free VF of openshift.io/sriov_highnet"},
		{name: "four GPUs need VFs on two NICs", free0: 1, free6: 1, gpus: 4, vfs: "2"},
		{name: "four GPUs, one VF cannot cover both pairs", free0: 1, free6: 1, gpus: 4, vfs: "1", wantCode: fwk.Unschedulable, wantMsg: "no free VF"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newTestPlugin(t, nil, sriovNRT(t, tc.free0, tc.free6))
			cycle, st := preFilter(t, pl, makePod("p", tc.gpus, nil, res, tc.vfs), nodeInfo("big", 16))
			if !st.IsSuccess() {
				t.Fatal(st)
			}
			got := pl.Filter(t.Context(), cycle, nil, nodeInfo("h20", 8))
			if got.Code() != tc.wantCode || !strings.Contains(got.Message(), tc.wantMsg) {
				t.Errorf("Filter = %v %q, want %v containing %q", got.Code(), got.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// TestPlansLeaveVFGPUs: on an H20 with VFs on the NICs next to GPUs 0,1
// and 6,7 only, RDMA pods without VFs take the other GPUs first, and do
// not count a GPU next to free VFs as good packing, so pods that must have
// a VF are not stranded by pods that could go anywhere.
func TestPlansLeaveVFGPUs(t *testing.T) {
	pl, c := newTestPlugin(t, nil, sriovNRT(t, 2, 2))
	v := c.view("h20")
	li := placement.LevelIndex(pl.scoring.defaults.MaxLevel)
	keep := v.VFKeepers(li)
	byBus := map[string]int{}
	for g := range v.C.GPUs {
		byBus[v.C.GPUs[g].BusID] = g
	}
	if keep.Count() != 4 || keep&(1<<0) == 0 || keep&(1<<7) == 0 {
		t.Fatalf("GPUs next to free VFs: %b, want 0, 1, 6 and 7", keep)
	}
	var taken nrt.GPUSet
	for i := range 5 {
		pod := makePod(fmt.Sprintf("p%d", i), 1, nil, rdma, "1")
		cycle, st := preFilter(t, pl, pod, nodeInfo("big", 16))
		if !st.IsSuccess() {
			t.Fatal(st)
		}
		if st := pl.Reserve(t.Context(), cycle, pod, "h20"); !st.IsSuccess() {
			t.Fatal(st)
		}
		s, _ := getState(cycle)
		g := byBus[s.planned.GPUs[0]]
		taken |= 1 << g
		if next := i >= 4; (keep&(1<<g) != 0) != next {
			t.Errorf("pod %d planned GPU %d (next to free VFs: %v) with %b taken before", i, g, keep&(1<<g) != 0, taken&^(1<<g))
		}
	}
	// GPU 0's switch is broken (by a VF pod, say): GPU 1 beside it is good
	// packing for a pod that needs a VF, not for one that does not.
	w := *v
	w.Free = v.C.Healthy &^ 1
	plain := pl.scoring.defaults
	plain.GPUs, plain.RDMA = 1, true
	withVF := plain
	withVF.VFs = []vfRequest{{Resource: "openshift.io/sriov_highnet", Count: 1}}
	if got := w.Packing(&plain, 1<<1); got != 0 {
		t.Errorf("packing of GPU 1 for a pod without VFs = %v, want 0", got)
	}
	if got := w.Packing(&withVF, 1<<1); got != 1 {
		t.Errorf("packing of GPU 1 for a VF pod = %v, want 1", got)
	}
}

// TestReserveNeverDoubleBooks: with the object lagging (it never changes
// here), successive pods on one node get disjoint GPUs, then the node is
// full; Unreserve gives the GPUs back; StaleTopology Reject waits.
func TestReserveNeverDoubleBooks(t *testing.T) {
	pl, st := newTestPlugin(t, nil, handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7))
	seen := map[string]string{}
	for i, name := range []string{"p1", "p2", "p3", "p4"} {
		pod := makePod(name, 1, nil, rdma, "1")
		cycle, s := preFilter(t, pl, pod, nodeInfo("big", 16))
		if !s.IsSuccess() {
			t.Fatal(s)
		}
		if f := pl.Filter(t.Context(), cycle, pod, nodeInfo("n", 8)); !f.IsSuccess() {
			t.Fatalf("pod %d: %v", i, f)
		}
		if r := pl.Reserve(t.Context(), cycle, pod, "n"); !r.IsSuccess() {
			t.Fatal(r)
		}
		ps, _ := getState(cycle)
		if ps.planned == nil || len(ps.planned.GPUs) != 1 || ps.planned.Level != "PIX" {
			t.Fatalf("plan %+v", ps.planned)
		}
		if prev, dup := seen[ps.planned.GPUs[0]]; dup {
			t.Fatalf("%s planned on GPU %s already planned for %s", name, ps.planned.GPUs[0], prev)
		}
		seen[ps.planned.GPUs[0]] = name
	}
	pod := makePod("p5", 1, nil, rdma, "1")
	cycle, _ := preFilter(t, pl, pod, nodeInfo("big", 16))
	if f := pl.Filter(t.Context(), cycle, pod, nodeInfo("n", 8)); f.IsSuccess() {
		t.Fatal("a fifth 1-GPU RDMA pod passed with the four aligned GPUs reserved")
	}
	pl.Unreserve(t.Context(), cycle, makePod("p2", 1, nil), "n")
	if f := pl.Filter(t.Context(), cycle, pod, nodeInfo("n", 8)); !f.IsSuccess() {
		t.Fatalf("after Unreserve: %v", f)
	}

	strict, _ := newTestPlugin(t, func(a *Args) { a.StaleTopology = StaleReject }, handNRT("n", 0, 1, 2, 3))
	c1, _ := preFilter(t, strict, makePod("q1", 1, nil, rdma, "1"), nodeInfo("big", 16))
	_ = strict.Reserve(t.Context(), c1, makePod("q1", 1, nil, rdma, "1"), "n")
	c2, _ := preFilter(t, strict, makePod("q2", 1, nil, rdma, "1"), nodeInfo("big", 16))
	if f := strict.Filter(t.Context(), c2, nil, nodeInfo("n", 8)); f.Code() != fwk.Unschedulable || !strings.Contains(f.Message(), "not caught up") {
		t.Errorf("StaleTopology Reject: %v", f)
	}

	// A reservation the object never confirms expires.
	st.now = func() time.Time { return time.Now().Add(time.Hour) }
	if v, _ := st.View("n"); !v.stale {
		t.Error("reservation dropped before the sweep")
	}
	st.expireDue()
	if v, _ := st.View("n"); v.stale {
		t.Error("reservations older than the timeout are still held")
	}
}

func TestScore(t *testing.T) {
	// certain: every free GPU is aligned; uncertain: half are.
	certain, uncertain, nicless := handNRT("certain", 0, 1), handNRT("uncertain", 0, 1, 6, 7), handNRT("nicless", 0, 1, 4, 5)
	pl, _ := newTestPlugin(t, nil, certain, uncertain, nicless)
	score := func(pod string, g int64, node string, extra ...string) int64 {
		p := makePod(pod, g, nil, extra...)
		cycle, _ := preFilter(t, pl, p, nodeInfo("big", 16))
		s, st := pl.Score(t.Context(), cycle, p, nodeInfo(node, 8))
		if !st.IsSuccess() {
			t.Fatal(st)
		}
		return s
	}
	if a, b := score("r", 1, "certain", rdma, "1"), score("r", 1, "uncertain", rdma, "1"); a <= b {
		t.Errorf("RDMA pod: certain node %d should beat uncertain node %d", a, b)
	}
	if a, b := score("plain", 2, "nicless", nil...), score("plain", 2, "certain", nil...); a <= b {
		t.Errorf("pod without RDMA: node with free NIC-less GPUs %d should beat one with only aligned GPUs %d", a, b)
	}
	if s := score("r", 1, "nowhere", rdma, "1"); s != 0 {
		t.Errorf("node without object scored %d", s)
	}
	scores := fwk.NodeScoreList{{Name: "a", Score: 20}, {Name: "b", Score: 40}}
	if st := pl.NormalizeScore(t.Context(), nil, nil, scores); !st.IsSuccess() || scores[1].Score != fwk.MaxNodeScore || scores[0].Score != 50 {
		t.Errorf("NormalizeScore = %v %v", scores, st)
	}
}

// TestPlanKeepsSwitchesWhole: with switch 0 half used, a 1-GPU RDMA pod takes
// the other GPU of switch 0, not a GPU of the whole switch 1.
func TestPlanKeepsSwitchesWhole(t *testing.T) {
	pl, _ := newTestPlugin(t, nil, handNRT("n", 1, 2, 3))
	pod := makePod("p", 1, nil, rdma, "1")
	cycle, _ := preFilter(t, pl, pod, nodeInfo("big", 16))
	if r := pl.Reserve(t.Context(), cycle, pod, "n"); !r.IsSuccess() {
		t.Fatal(r)
	}
	s, _ := getState(cycle)
	want := annotations.Allocation{Node: "n", GPUs: []string{"0000:20:00.0"}, NICs: []string{"mlx5_0"}, Level: "PIX"}
	if got := *s.planned; got.Node != want.Node || strings.Join(got.GPUs, ",") != strings.Join(want.GPUs, ",") || strings.Join(got.NICs, ",") != "mlx5_0" || got.Level != "PIX" {
		t.Errorf("plan %+v, want %+v", got, want)
	}
}

func TestArgs(t *testing.T) {
	if err := validate(DefaultArgs()); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := []struct {
		mutate func(*Args)
		field  string
	}{
		{func(a *Args) { a.DefaultMaxLevel = "NV" }, "args.defaultMaxLevel"},
		{func(a *Args) { a.DefaultPolicy = "always" }, "args.defaultPolicy"},
		{func(a *Args) { a.MissingTopology = "Panic" }, "args.missingTopology"},
		{func(a *Args) { a.StaleTopology = "Hope" }, "args.staleTopology"},
		{func(a *Args) { a.ScoringStrategy.Type = "Random" }, "args.scoringStrategy.type"},
		{func(a *Args) { a.ScoringStrategy.PackingWeight = -1 }, "args.scoringStrategy.packingWeight"},
		{func(a *Args) { a.SRIOVResourceNames = []string{"sriov_highnet"} }, "args.sriovResourceNames[0]"},
		{func(a *Args) { a.GPUResourceName = " " }, "args.gpuResourceName"},
		{func(a *Args) { a.TopologyMaxAge = metav1.Duration{Duration: -time.Second} }, "args.topologyMaxAge"},
		{func(a *Args) { a.JobLabels = []string{"job name"} }, "args.jobLabels[0]"},
		{func(a *Args) { a.JobLabels = make([]string, 17) }, "args.jobLabels"},
	}
	for _, tc := range bad {
		a := DefaultArgs()
		tc.mutate(a)
		err := validate(a)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("want an error naming %s, got %v", tc.field, err)
		}
	}
}

// BenchmarkFilter: one node per call, as the scheduler calls it; the
// objects are real shapes published through the exporter's schema.

// TestSkippedPodThroughLaterPoints: PreFilter skips whole-node pods without
// RDMA, yet the framework still calls Score, Reserve and PreBind's
// preflight for them.
func TestSkippedPodThroughLaterPoints(t *testing.T) {
	pl, _ := newTestPlugin(t, nil, handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7))
	pod := makePod("whole", 8, nil)
	cycle, st := preFilter(t, pl, pod, nodeInfo("n", 8))
	if st.Code() != fwk.Skip {
		t.Fatalf("PreFilter = %v, want Skip", st)
	}
	if s, st := pl.Score(t.Context(), cycle, pod, nodeInfo("n", 8)); !st.IsSuccess() || s != 0 {
		t.Errorf("Score = %d, %v", s, st)
	}
	if st := pl.Reserve(t.Context(), cycle, pod, "n"); !st.IsSuccess() {
		t.Errorf("Reserve = %v", st)
	}
	if _, st := pl.PreBindPreFlight(t.Context(), cycle, pod, "n"); st.Code() != fwk.Skip {
		t.Errorf("PreBindPreFlight = %v, want Skip", st)
	}
	pl.Unreserve(t.Context(), cycle, pod, "n")
}

// TestPodDeletedHint: a bound GPU pod that goes requeues; others do not.
func TestPodDeletedHint(t *testing.T) {
	pl, _ := newTestPlugin(t, nil)
	logger := klog.Background()
	deleted := makePod("gone", 2, nil, rdma, "1")
	deleted.Spec.NodeName = "n"
	if h, _ := pl.isSchedulableAfterPodDeleted(logger, makePod("w", 1, nil), deleted, nil); h != fwk.Queue {
		t.Errorf("deleted GPU pod: %v, want Queue", h)
	}
	if h, _ := pl.isSchedulableAfterPodDeleted(logger, makePod("w", 1, nil), makePod("cpu", 0, nil), nil); h != fwk.QueueSkip {
		t.Errorf("deleted CPU pod: %v, want QueueSkip", h)
	}
}

func TestTakesLargestNode(t *testing.T) {
	nodes := func(gpus ...int64) []fwk.NodeInfo {
		var out []fwk.NodeInfo
		for i, g := range gpus {
			out = append(out, nodeInfo(fmt.Sprint("n", i), g))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		nodes []fwk.NodeInfo
		want  int64
		skip  bool
	}{
		{"smaller than every node", nodes(8, 8), 2, false},
		{"every GPU of the largest", nodes(8, 4), 8, true},
		{"more than any node", nodes(4), 8, true},
		{"a larger node later in the list", nodes(8, 8, 16), 8, false},
		{"no node with GPUs", nodes(0, 0), 1, false},
		{"no nodes", nil, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := takesLargestNode(tc.nodes, "nvidia.com/gpu", tc.want); got != tc.skip {
				t.Errorf("takesLargestNode = %v, want %v", got, tc.skip)
			}
		})
	}
}

// TestPrecomputedAnswers: the answers a view carries for common requests
// are the ones the search gives, on every subset of free GPUs of the
// half-NIC shape and on an HGX H100 with some GPUs taken, for both
// strategies.
func TestPrecomputedAnswers(t *testing.T) {
	var objs []*v1alpha2.NodeResourceTopology
	for mask := 0; mask < 256; mask++ {
		var free []int
		for g := 0; g < 8; g++ {
			if mask&(1<<g) != 0 {
				free = append(free, g)
			}
		}
		objs = append(objs, handNRT(fmt.Sprint("half-", mask), free...))
	}
	objs = append(objs, machineNRT(t, "h100", machines.HGXH100, 1, 2, 6))
	for _, strategy := range []string{StrategyBalanced, StrategyMostAligned} {
		pl, st := newTestPlugin(t, func(a *Args) { a.ScoringStrategy.Type = strategy }, objs...)
		checked := 0
		for _, o := range objs {
			v, _ := st.View(o.Name)
			if v.answered != len(v.C.GPUs) {
				t.Fatalf("%s: %d answers for %d GPUs", o.Name, v.answered, len(v.C.GPUs))
			}
			for g := 1; g < len(v.C.GPUs); g++ {
				for _, rdma := range []bool{true, false} {
					req := &request{GPUs: g, RDMA: rdma, MaxLevel: maxLevelOf(pl.args), Required: true}
					if rdma && v.answers[g].feasible != v.fits(req, placement.LevelIndex(req.MaxLevel)) {
						t.Errorf("%s, %s, %d GPUs: precomputed feasible %v", strategy, o.Name, g, v.answers[g].feasible)
					}
					want, got := pl.scoreOf(v, req), int64(v.answers[g].plain)
					if rdma {
						got = int64(v.answers[g].score)
					}
					if got != want {
						t.Errorf("%s, %s, %d GPUs, rdma %v: precomputed score %d, search %d", strategy, o.Name, g, rdma, got, want)
					}
					checked++
				}
			}
		}
		if checked == 0 {
			t.Fatal("nothing checked")
		}
		// Through the extension points, which read the published copy.
		for _, o := range objs {
			v, _ := st.View(o.Name)
			for g := 1; g < len(v.C.GPUs); g++ {
				p := makePod("p", int64(g), nil, rdma, "1")
				cycle, _ := preFilter(t, pl, p, nodeInfo("big", 16))
				req := &request{GPUs: g, RDMA: true, MaxLevel: maxLevelOf(pl.args), Required: true}
				if got, _ := pl.Score(t.Context(), cycle, p, nodeInfo(o.Name, 8)); got != pl.scoreOf(v, req) {
					t.Errorf("%s, %s, %d GPUs: Score %d, search %d", strategy, o.Name, g, got, pl.scoreOf(v, req))
				}
				if f := pl.Filter(t.Context(), cycle, p, nodeInfo(o.Name, 8)); f.IsSuccess() != v.fits(req, placement.LevelIndex(req.MaxLevel)) {
					t.Errorf("%s, %s, %d GPUs: Filter %v", strategy, o.Name, g, f)
				}
			}
		}
	}
	// Requests off the common path (VFs, another level) still search.
	pl, _ := newTestPlugin(t, nil, handNRT("n", 0, 1, 4, 5))
	p := makePod("p", 2, map[string]string{annotations.MaxLevel: "PIX"}, rdma, "1")
	cycle, _ := preFilter(t, pl, p, nodeInfo("big", 16))
	if s, _ := getState(cycle); s.req.Common {
		t.Error("a pod with its own max level counted as common")
	}
}

// sixteenGPUs is HalfNICs doubled: eight switches of two GPUs, a NIC on
// every other switch (GPUs 2,3, 6,7, 10,11, 14,15 have one).
func sixteenGPUs(t *machines.Tree) {
	t.NUMANode(0, "0-63")
	for sw := 0; sw < 8; sw++ {
		b := 0x10 + 0x10*sw
		path := fmt.Sprintf("pci0000:00/0000:00:%02x.0/0000:%02x:00.0", sw+1, b)
		for i := 0; i < 2; i++ {
			t.GPU(fmt.Sprintf("%s/0000:%02x:%02x.0/0000:%02x:00.0", path, b+1, i, b+2+i), 0, "0-63")
		}
		if sw%2 == 1 {
			t.NIC(fmt.Sprintf("%s/0000:%02x:08.0/0000:%02x:00.0", path, b+1, b+8), fmt.Sprint("mlx5_", sw/2), 0)
		}
	}
}

// TestSixteenGPUs: a 16-GPU node carries answers for every partial
// request (1 to 15 GPUs); Filter and Score agree with the search.
func TestSixteenGPUs(t *testing.T) {
	obj := machineNRT(t, "big", sixteenGPUs, 0, 2)
	pl, st := newTestPlugin(t, nil, obj)
	v, _ := st.View("big")
	if len(v.C.GPUs) != 16 || v.answered != 16 {
		t.Fatalf("%d GPUs, %d answers, want 16 and 16", len(v.C.GPUs), v.answered)
	}
	feasible := 0
	for g := 1; g < 16; g++ {
		p := makePod("p", int64(g), nil, rdma, "1")
		cycle, _ := preFilter(t, pl, p, nodeInfo("big", 16), nodeInfo("bigger", 32))
		req := &request{GPUs: g, RDMA: true, MaxLevel: maxLevelOf(pl.args), Required: true}
		want := v.fits(req, placement.LevelIndex(req.MaxLevel))
		if f := pl.Filter(t.Context(), cycle, p, nodeInfo("big", 16)); f.IsSuccess() != want {
			t.Errorf("%d GPUs: Filter %v, search says feasible %v", g, f, want)
		}
		if got, _ := pl.Score(t.Context(), cycle, p, nodeInfo("big", 16)); got != pl.scoreOf(v, req) {
			t.Errorf("%d GPUs: Score %d, search %d", g, got, pl.scoreOf(v, req))
		}
		if want {
			feasible++
		}
	}
	// GPUs 2,3,6,7,10,11,14,15 have a NIC and 2 is taken: 7 aligned free.
	if feasible != 7 {
		t.Errorf("%d request sizes fit, want 7 (1 to 7 GPUs)", feasible)
	}
}

func TestSweepInterval(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{
		2 * time.Minute:  10 * time.Second,
		30 * time.Second: 3 * time.Second,
		time.Second:      time.Second,
	} {
		if got := sweepInterval(timeout); got != want {
			t.Errorf("sweepInterval(%s) = %s, want %s", timeout, got, want)
		}
	}
}

// TestStateOfOtherCycles: Filter and Score read each cycle's own state,
// not the last one PreFilter wrote (an older cycle, a clone as preemption
// makes, a skipped pod).
func TestStateOfOtherCycles(t *testing.T) {
	pl, _ := newTestPlugin(t, nil, handNRT("n", 0, 1, 4, 5))
	fits, tooBig := makePod("fits", 2, nil, rdma, "1"), makePod("big", 3, nil, rdma, "1")
	node := nodeInfo("n", 8)
	first, _ := preFilter(t, pl, fits, node, nodeInfo("other", 8))
	clone := first.Clone()
	second, _ := preFilter(t, pl, tooBig, node, nodeInfo("other", 8))
	skipped, st := preFilter(t, pl, makePod("cpu", 0, nil), node)
	if !st.IsSkip() {
		t.Fatalf("PreFilter of a pod without GPUs: %v, want Skip", st)
	}
	for _, tc := range []struct {
		name  string
		cycle fwk.CycleState
		fits  bool
	}{
		{"older cycle", first, true},
		{"clone of the older cycle", clone, true},
		{"last cycle", second, false},
		{"skipped pod's cycle", skipped, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pl.Filter(t.Context(), tc.cycle, nil, node); got.IsSuccess() != tc.fits {
				t.Errorf("Filter = %v, want fits %v", got, tc.fits)
			}
		})
	}
	if score, st := pl.Score(t.Context(), skipped, nil, node); score != 0 || !st.IsSuccess() {
		t.Errorf("Score of a skipped pod = %d, %v; want 0", score, st)
	}
}

// TestPreScoreSkipsUniformScores: PreScore skips Score only when Score
// would give every candidate (every node Filter passes) the same, checked
// against Score on clusters made of every subset of a set of HGX H100s and
// half-NIC nodes with some GPUs taken, for pods of 1 to 7 GPUs with and
// without RDMA; it does skip on a fleet of one fully aligned shape, and
// follows reservations and nodes going away.
func TestPreScoreSkipsUniformScores(t *testing.T) {
	all := []*v1alpha2.NodeResourceTopology{
		machineNRT(t, "h100-a", machines.HGXH100), machineNRT(t, "h100-b", machines.HGXH100, 0, 3), machineNRT(t, "h100-c", machines.HGXH100, 1, 2, 5, 6),
		handNRT("half-a", 0, 1, 2, 3, 4, 5, 6, 7), handNRT("half-b", 0, 1, 4, 5), handNRT("half-c", 0, 1, 2, 3, 4, 5),
	}
	skipped, scored := 0, 0
	for subset := 1; subset < 1<<len(all); subset++ {
		var objs []*v1alpha2.NodeResourceTopology
		var nodes []fwk.NodeInfo
		for i, o := range all {
			if subset&(1<<i) != 0 {
				objs, nodes = append(objs, o), append(nodes, nodeInfo(o.Name, 8))
			}
		}
		pl, _ := newTestPlugin(t, nil, objs...)
		for g := int64(1); g < 8; g++ {
			for _, extra := range [][]string{{rdma, "1"}, nil} {
				p := makePod("p", g, nil, extra...)
				cycle, _ := preFilter(t, pl, p, nodeInfo("big", 16))
				var candidates []fwk.NodeInfo
				for _, n := range nodes {
					if pl.Filter(t.Context(), cycle, p, n).IsSuccess() {
						candidates = append(candidates, n)
					}
				}
				if len(candidates) == 0 || !pl.PreScore(t.Context(), cycle, p, candidates).IsSkip() {
					scored++
					continue
				}
				skipped++
				first, _ := pl.Score(t.Context(), cycle, p, candidates[0])
				for _, n := range candidates[1:] {
					if got, _ := pl.Score(t.Context(), cycle, p, n); got != first {
						t.Errorf("cluster %06b, %d GPUs %v: PreScore skipped, but %s scores %d and %s %d", subset, g, extra, candidates[0].Node().Name, first, n.Node().Name, got)
					}
				}
			}
		}
	}
	if skipped == 0 || scored == 0 {
		t.Errorf("%d skipped, %d scored: want some of each", skipped, scored)
	}

	pod := makePod("p", 1, nil, rdma, "1")
	preScore := func(pl *NICAffinity, p *v1.Pod, nodes ...string) *fwk.Status {
		t.Helper()
		var infos []fwk.NodeInfo
		for _, n := range nodes {
			infos = append(infos, nodeInfo(n, 8))
		}
		cycle, _ := preFilter(t, pl, p, nodeInfo("big", 16))
		return pl.PreScore(t.Context(), cycle, p, infos)
	}
	t.Run("fleet of one aligned shape", func(t *testing.T) {
		pl, _ := newTestPlugin(t, nil, all[:3]...)
		for g := int64(1); g < 8; g++ {
			for _, p := range []*v1.Pod{makePod("p", g, nil, rdma, "1"), makePod("p", g, nil)} {
				if st := preScore(pl, p, "h100-a", "h100-b", "h100-c"); !st.IsSkip() {
					t.Errorf("%d GPUs: PreScore = %v, want Skip", g, st)
				}
			}
		}
	})
	t.Run("reservations and nodes going away", func(t *testing.T) {
		pl, st := newTestPlugin(t, nil, handNRT("x", 0, 1, 4, 5), handNRT("y", 0, 1, 4, 5))
		if s := preScore(pl, pod, "x", "y"); !s.IsSkip() {
			t.Fatalf("two identical nodes: PreScore = %v, want Skip", s)
		}
		st.Reserve("x", "other", 1<<4, nil)
		if s := preScore(pl, pod, "x", "y"); s.IsSkip() {
			t.Error("one node half taken: PreScore skipped")
		}
		st.Unreserve("x", "other")
		if s := preScore(pl, pod, "x", "y"); !s.IsSkip() {
			t.Errorf("reservation dropped: PreScore = %v, want Skip", s)
		}
		st.Reserve("x", "other", 1<<4, nil)
		st.remove("x")
		if s := preScore(pl, pod, "y"); !s.IsSkip() {
			t.Errorf("odd node gone: PreScore = %v, want Skip", s)
		}
	})
	t.Run("nodes without an object", func(t *testing.T) {
		pl, _ := newTestPlugin(t, nil, all[0])
		// They score 0 but Filter rejects them for this pod.
		if s := preScore(pl, pod, "h100-a", "no-object"); !s.IsSkip() {
			t.Errorf("RDMA pod: PreScore = %v, want Skip", s)
		}
		ignoring, _ := newTestPlugin(t, func(a *Args) { a.MissingTopology = MissingIgnore }, all[0])
		if s := preScore(ignoring, pod, "h100-a", "no-object"); s.IsSkip() {
			t.Error("missingTopology Ignore: PreScore skipped with a node scoring 0 among candidates")
		}
	})
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		skip bool
	}{
		{"pod without GPUs", makePod("cpu", 0, nil), true},
		{"own max level", makePod("p", 1, map[string]string{annotations.MaxLevel: "PIX"}, rdma, "1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newTestPlugin(t, nil, all[:3]...)
			if s := preScore(pl, tc.pod, "h100-a", "h100-b"); s.IsSkip() != tc.skip {
				t.Errorf("PreScore = %v, want skip %v", s, tc.skip)
			}
		})
	}
}

// TestRemoveFreesTheEntry: a node that goes leaves nothing behind (its
// entry, its cell, its reservations, its share of the spread), so a
// cluster that replaces nodes does not grow the cache.
func TestRemoveFreesTheEntry(t *testing.T) {
	pl, st := newTestPlugin(t, nil)
	for i := 0; i < 100; i++ {
		node := fmt.Sprint("autoscaled-", i)
		c, err := nrt.Compile(handNRT(node, 0, 1, 2, 3), "nvidia.com/gpu")
		if err != nil {
			t.Fatal(err)
		}
		st.set(node, "", c, nil, nil)
		st.Reserve(node, types.UID(node+"-pod"), 1, nil)
		st.remove(node)
		st.remove(node) // twice: a Node and its object both go
	}
	if len(st.nodes) != 0 || st.cells.len() != 0 || len(st.podNode) != 0 {
		t.Errorf("after removing every node: %d entries, %d cells, %d reservations", len(st.nodes), st.cells.len(), len(st.podNode))
	}
	for g := 1; g < maxAnswered; g++ {
		if st.spread.unanswered[g].Load() != 0 || st.spread.summary[g][kindPlain].Load() != 0 || st.spread.summary[g][kindAligned].Load() != 0 {
			t.Fatalf("spread still counts removed nodes for %d GPUs", g)
		}
	}
	if v, why := st.View("autoscaled-7"); v != nil || why != "no NodeResourceTopology for this node" {
		t.Errorf("removed node: %v %q", v, why)
	}
	_ = pl
}

// TestQueueingHintReadsVersionFirst: once the cache holds an object's
// version, the hint answers from the cache without converting the event's
// object (here a body that would not convert at all).
func TestQueueingHintReadsVersionFirst(t *testing.T) {
	pl, st := newTestPlugin(t, nil)
	obj := handNRT("n", 0, 1, 2)
	obj.ResourceVersion = "42"
	st.observe(obj)
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "n", "resourceVersion": "42"}, "zones": "not a list"}}
	logger := klog.Background()
	if h, err := pl.isSchedulableAfterNRTChange(logger, makePod("two", 2, nil, rdma, "1"), nil, u); err != nil || h != fwk.Queue {
		t.Errorf("known version, 3 free, 2 wanted: %v %v, want Queue", h, err)
	}
	u.SetResourceVersion("43") // a new version must be converted: this one cannot be
	if h, _ := pl.isSchedulableAfterNRTChange(logger, makePod("two", 2, nil, rdma, "1"), nil, u); h != fwk.QueueSkip {
		t.Errorf("new version that does not convert: %v, want QueueSkip", h)
	}
}

// TestAdoptPlan: a bound pod's plan holds its GPUs only when the pod is
// this scheduler's and the plan is no larger than its request; a tenant's
// own annotation on a pod without GPUs, or on another scheduler's pod,
// holds nothing.
func TestAdoptPlan(t *testing.T) {
	// GPUs 0-3 free; bus IDs 0000:10:00.0, 0000:20:00.0, ...
	plan := func(gpus ...int) string {
		a := &annotations.Allocation{Node: "n"}
		for _, g := range gpus {
			a.GPUs = append(a.GPUs, fmt.Sprintf("0000:%02x:00.0", 0x10*(g+1)))
		}
		return annotations.Marshal(a)
	}
	for _, tc := range []struct {
		name      string
		scheduler string
		gpus      int64
		plan      string
		node      string
		wantFree  int
	}{
		{"own pod, plan its size", "nicaffinity-scheduler", 2, plan(0, 1), "n", 2},
		{"own pod, plan smaller", "nicaffinity-scheduler", 2, plan(0), "n", 3},
		{"another scheduler's pod", "default-scheduler", 2, plan(0, 1), "n", 4},
		{"pod without GPUs", "nicaffinity-scheduler", 0, plan(0, 1, 2, 3), "n", 4},
		{"plan larger than the request", "nicaffinity-scheduler", 1, plan(0, 1, 2, 3), "n", 4},
		{"plan for another node", "nicaffinity-scheduler", 2, plan(0, 1), "m", 4},
		{"garbled plan", "nicaffinity-scheduler", 2, "{", "n", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, st := newTestPlugin(t, nil, handNRT("n", 0, 1, 2, 3))
			feed := &informerFeed{c: st, schedulerName: "nicaffinity-scheduler"}
			p := makePod("p", tc.gpus, map[string]string{annotations.AllocationKey: tc.plan})
			p.Spec.SchedulerName, p.Spec.NodeName = tc.scheduler, tc.node
			feed.adoptPlan(p)
			v, _ := st.View("n")
			if got := v.Free.Count(); got != tc.wantFree {
				t.Errorf("free GPUs after adoption: %d, want %d", got, tc.wantFree)
			}
		})
	}
}

// TestStaleOnSchedulerClock: an object of which no new version arrives
// for longer than topologyMaxAge counts as topology unknown, by the
// scheduler's clock (fake here), whatever its heartbeat says: missing, in
// the future, or from a node clock 5 minutes behind. A new version makes
// it count again; a version already seen (an informer's relist) does not;
// a maxAge of 0 turns the check off.
func TestStaleOnSchedulerClock(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	withBeat := func(at time.Time, rv string) *v1alpha2.NodeResourceTopology {
		o := handNRT("n", 0, 1, 2, 3)
		if !at.IsZero() {
			o.Attributes = append(o.Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrHeartbeat, Value: at.Format(time.RFC3339)})
		}
		o.ResourceVersion = rv
		return o
	}
	want := "NodeResourceTopology is stale: not refreshed by its exporter since 2026-12-01T12:00:00Z (no new version for longer than topologyMaxAge 5m0s)"
	for name, heartbeat := range map[string]time.Time{
		"heartbeat current":      t0,
		"no heartbeat":           {},
		"heartbeat in 2099":      time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
		"node clock 5 min slow":  t0.Add(-5 * time.Minute),
		"node clock an hour off": t0.Add(-time.Hour),
	} {
		t.Run(name, func(t *testing.T) {
			pl, st := newTestPlugin(t, nil)
			st.maxAge = 5 * time.Minute
			clock := t0
			st.now = func() time.Time { return clock }
			pod := makePod("p", 1, nil, rdma, "1")
			filter := func() *fwk.Status {
				cycle, _ := preFilter(t, pl, pod, nodeInfo("big", 16))
				return pl.Filter(t.Context(), cycle, pod, nodeInfo("n", 8))
			}
			st.observe(withBeat(heartbeat, "1"))
			if s := filter(); !s.IsSuccess() {
				t.Fatalf("just received: %v", s)
			}
			clock = t0.Add(4 * time.Minute)
			st.expireDue()
			if s := filter(); !s.IsSuccess() {
				t.Errorf("received 4 minutes ago, limit 5: %v", s)
			}
			// The exporter stopped: no new version, whatever the heartbeat.
			clock = t0.Add(7 * time.Minute)
			st.expireDue()
			if s := filter(); s.Code() != fwk.UnschedulableAndUnresolvable || s.Message() != want {
				t.Errorf("received 7 minutes ago: %v, want %q", s, want)
			}
			before := st.view("n")
			clock = t0.Add(8 * time.Minute)
			st.expireDue()
			if st.view("n") != before {
				t.Error("a node already stale was rebuilt again by the next sweep")
			}
			// A relist delivers the version already held: still stale.
			st.observe(withBeat(heartbeat, "1"))
			if s := filter(); s.IsSuccess() {
				t.Error("a relisted old version made the node fresh")
			}
			// A live exporter's next write is a new version, with the
			// heartbeat its node's clock gives.
			st.observe(withBeat(heartbeat.Add(time.Minute), "2"))
			if s := filter(); !s.IsSuccess() {
				t.Errorf("new version: %v", s)
			}
		})
	}
	_, st := newTestPlugin(t, nil)
	clock := t0
	st.maxAge, st.now = 0, func() time.Time { return clock }
	st.observe(withBeat(t0, "1"))
	clock = t0.Add(time.Hour)
	st.expireDue()
	if v, why := st.View("n"); v == nil {
		t.Errorf("check off: %q", why)
	}
	if _, err := nrt.Compile(withBeatValue("yesterday"), "nvidia.com/gpu"); err == nil || !strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("garbled heartbeat: %v", err)
	}
}

func withBeatValue(v string) *v1alpha2.NodeResourceTopology {
	o := handNRT("n", 0, 1)
	o.Attributes = append(o.Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrHeartbeat, Value: v})
	return o
}

// TestWaitForCRD: the scheduler starts once the CRD is served and gives up
// with an error naming it when it never is.
func TestWaitForCRD(t *testing.T) {
	served := &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{{
		GroupVersion: "topology.node.k8s.io/v1alpha2", APIResources: []metav1.APIResource{{Name: "noderesourcetopologies"}}}}}}
	if err := waitForCRD(t.Context(), served, time.Second, time.Millisecond); err != nil {
		t.Errorf("CRD served: %v", err)
	}
	missing := &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{}}
	err := waitForCRD(t.Context(), missing, 20*time.Millisecond, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "NodeResourceTopology CRD (noderesourcetopologies.topology.node.k8s.io, version v1alpha2) is not served") {
		t.Errorf("CRD missing: %v", err)
	}
}

// TestWholeNodeRDMAScore: a pod that takes every GPU and needs RDMA scores
// higher where every GPU has its own NIC (HGX H100) than where half of them
// have none, and Reserve plans all of its GPUs so the kubelet can follow.
func TestWholeNodeRDMAScore(t *testing.T) {
	h100 := machineNRT(t, "h100", machines.HGXH100)
	pl, _ := newTestPlugin(t, nil, h100, handNRT("half", 0, 1, 2, 3, 4, 5, 6, 7))
	pod := makePod("whole", 8, map[string]string{annotations.Policy: "preferred"}, rdma, "1")
	cycle, st := preFilter(t, pl, pod, nodeInfo("h100", 8), nodeInfo("half", 8))
	if !st.IsSuccess() && !st.IsSkip() {
		t.Fatalf("PreFilter = %v", st)
	}
	full, _ := pl.Score(t.Context(), cycle, pod, nodeInfo("h100", 8))
	half, _ := pl.Score(t.Context(), cycle, pod, nodeInfo("half", 8))
	if full <= half {
		t.Errorf("Score on a NIC per GPU %d, on half the GPUs with a NIC %d: want the first higher", full, half)
	}
	if st := pl.Reserve(t.Context(), cycle, pod, "h100"); !st.IsSuccess() {
		t.Fatalf("Reserve = %v", st)
	}
	s, err := getState(cycle)
	if err != nil || s.planned == nil || len(s.planned.GPUs) != 8 || s.planned.Level != "PIX" {
		t.Errorf("plan %+v, %v; want all 8 GPUs at PIX", s.planned, err)
	}
}

// TestConfirmKeepsPodsNotYetBound: a pod this scheduler reserved may not be
// bound yet when the node's exporter writes: binding is asynchronous, and a
// pod group's member waits at Permit until its whole group is placed. That object
// matches the pods the scheduler sees on the node and still does not count
// the reserved pod: its reservation stays, or the next pod is planned on
// its GPUs (the real kubelet's burst found this: two plans on one GPU).
func TestConfirmKeepsPodsNotYetBound(t *testing.T) {
	_, st := newTestPlugin(t, nil, handNRT("n", 0, 1, 2, 3))
	pods := podsByNode()
	feed := &informerFeed{c: st, pods: pods, schedulerName: testProfile}
	bound := makePod("p", 1, nil)
	bound.UID, bound.Spec.NodeName, bound.Status.Phase = "uid-p", "n", v1.PodRunning
	if err := pods.Add(bound); err != nil {
		t.Fatal(err)
	}
	st.Reserve("n", "uid-p", nrt.GPUSet(0b0001), nil) // bound, seen
	st.Reserve("n", "uid-q", nrt.GPUSet(0b0110), nil) // reserved, not yet seen bound
	// The exporter counts p (GPU 0 in use) and not q.
	o := handNRT("n", 1, 2, 3)
	o.ResourceVersion = "2"
	o.Attributes = append(o.Attributes, v1alpha2.AttributeInfo{Name: podfingerprint.Attribute, Value: nrt.Fingerprint([]devices.Pod{{Namespace: "default", Name: "p"}})})
	feed.observe(o)
	v, _ := st.View("n")
	if got, want := v.Free, nrt.GPUSet(0b1000); got != want {
		t.Errorf("free GPUs %04b, want %04b (q's reservation kept, p's confirmed)", got, want)
	}
	if st.holds("uid-p") || !st.holds("uid-q") {
		t.Errorf("holds p %v, q %v; want p confirmed and q held", st.holds("uid-p"), st.holds("uid-q"))
	}
	feed.recheck(bound) // a pod event: the same set, q still not among it
	if !st.holds("uid-q") {
		t.Errorf("a recheck dropped q's reservation")
	}
}

// TestRecheckConfirmsOnPodEvents: a node's object and the scheduler's pod
// events come on different informers. When the object that counts a
// reserved pod arrives before the scheduler sees the pod bound, the
// fingerprints differ and the reservation stays; the pod's event then
// confirms it, so the reserved GPUs are not counted twice until the node's
// next write.
func TestRecheckConfirmsOnPodEvents(t *testing.T) {
	_, st := newTestPlugin(t, nil, handNRT("n", 0, 1, 2, 3))
	pods := podsByNode()
	feed := &informerFeed{c: st, pods: pods, schedulerName: testProfile}
	st.Reserve("n", "uid-p", nrt.GPUSet(0b0011), nil) // planned: GPUs 0 and 1
	// The device plugin gave the pod GPUs 2 and 3; the object says so and
	// counts the pod.
	o := handNRT("n", 0, 1)
	o.ResourceVersion = "2"
	o.Attributes = append(o.Attributes, v1alpha2.AttributeInfo{Name: podfingerprint.Attribute, Value: nrt.Fingerprint([]devices.Pod{{Namespace: "default", Name: "p"}})})
	feed.observe(o)
	free := func() int {
		v, _ := st.View("n")
		return v.Free.Count()
	}
	if got := free(); got != 0 {
		t.Fatalf("before the pod event: %d free GPUs, want 0 (the reservation still held)", got)
	}
	p := makePod("p", 2, nil)
	p.Spec.NodeName, p.Status.Phase = "n", v1.PodRunning
	if err := pods.Add(p); err != nil {
		t.Fatal(err)
	}
	// A 2-GPU pod turned down while the reservation held waits for room;
	// the confirmation makes it, so the pod is requeued here, as the
	// object's arrival would have requeued it had the pod's event come
	// first.
	var requeued []string
	feed.turnedDown = newWaits(clock.RealClock{}, func(pods map[string]*v1.Pod) {
		requeued = append(requeued, slices.Sorted(maps.Keys(pods))...)
	})
	feed.turnedDown.note(makePod("waiting", 2, nil), "", 2, 0)
	feed.recheck(p)
	if got := free(); got != 2 {
		t.Errorf("after the pod event: %d free GPUs, want 2 (the object counts the pod; the reservation is confirmed)", got)
	}
	if st.holds("uid-p") {
		t.Errorf("the reservation is still held")
	}
	if diff := cmp.Diff([]string{"default/waiting"}, requeued); diff != "" {
		t.Errorf("pods requeued when the confirmation made room (-want,+got):\n%s", diff)
	}
}

// TestReleaseBridgesAPodsEnd: when a pod ends, the scheduler's books free
// its GPUs at once and the node's object only when its exporter next
// writes. In between, the view counts the GPUs the exporter observed the
// pod holding as free, while the object does not count the node's pods as
// the scheduler sees them, and never past the object's next version, a
// reservation or the timeout.
func TestReleaseBridgesAPodsEnd(t *testing.T) {
	clock := time.Now()
	counting := func(rv string, names ...string) *v1alpha2.NodeResourceTopology {
		o := handNRT("n", 1, 2, 3) // GPU 0 in use
		o.ResourceVersion = rv
		var pods []devices.Pod
		for _, n := range names {
			pods = append(pods, devices.Pod{Namespace: "default", Name: n})
		}
		o.Attributes = append(o.Attributes, v1alpha2.AttributeInfo{Name: podfingerprint.Attribute, Value: nrt.Fingerprint(pods)})
		return o
	}
	setup := func(t *testing.T, observed bool) (*informerFeed, *Cache, cache.Indexer, *v1.Pod) {
		_, st := newTestPlugin(t, nil)
		st.now = func() time.Time { return clock }
		pods := podsByNode()
		feed := &informerFeed{c: st, pods: pods, schedulerName: testProfile}
		feed.observe(counting("1", "p"))
		v, _ := st.View("n")
		p := makePod("p", 1, nil)
		p.Spec.NodeName, p.Status.Phase = "n", v1.PodRunning
		if observed {
			p.Annotations = map[string]string{annotations.ObservedKey: fmt.Sprintf(`{"gpus":[{"busID":%q}],"aligned":false,"plan":"none"}`, v.C.GPUs[0].BusID)}
		}
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
		return feed, st, pods, p
	}
	const all, gpu0 = nrt.GPUSet(0b1111), nrt.GPUSet(0b0001)
	free := func(st *Cache) nrt.GPUSet {
		v, _ := st.View("n")
		return v.Free
	}
	expect := func(t *testing.T, st *Cache, want nrt.GPUSet, when string) {
		t.Helper()
		if got := free(st); got != want {
			t.Errorf("%s: free %04b, want %04b", when, got, want)
		}
	}
	deleted := func(feed *informerFeed, pods cache.Indexer, p *v1.Pod) {
		_ = pods.Delete(p)
		feed.podDeleted(p)
	}

	t.Run("deleted", func(t *testing.T) {
		feed, st, pods, p := setup(t, true)
		deleted(feed, pods, p)
		expect(t, st, all, "after the deletion")
		st.Reserve("n", "uid-q", gpu0, nil)
		expect(t, st, all&^gpu0, "a reservation on the released GPU")
		st.Unreserve("n", "uid-q")
		// The next object, whatever it says, replaces the release: this one
		// was written before the pod ended and still counts it.
		feed.observe(counting("2", "p"))
		expect(t, st, all&^gpu0, "after the next object (the object's own)")
	})
	t.Run("ended, then deleted", func(t *testing.T) {
		feed, st, pods, p := setup(t, true)
		done := p.DeepCopy()
		done.Status.Phase = v1.PodSucceeded
		_ = pods.Update(done)
		feed.podUpdated(p, done)
		expect(t, st, all, "after the pod ended")
		// Another pod took GPU 0, counted in a new object; the ended pod's
		// deletion releases nothing (the object differs from the pod set
		// the scheduler sees: r is not seen yet).
		feed.observe(counting("2", "r"))
		deleted(feed, pods, done)
		expect(t, st, all&^gpu0, "after the ended pod's deletion")
	})
	t.Run("timeout", func(t *testing.T) {
		feed, st, pods, p := setup(t, true)
		deleted(feed, pods, p)
		clock = clock.Add(st.timeout + time.Second)
		st.expireDue()
		expect(t, st, all&^gpu0, "past the timeout")
	})
	t.Run("not observed", func(t *testing.T) {
		feed, st, pods, p := setup(t, false)
		deleted(feed, pods, p)
		expect(t, st, all&^gpu0, "a pod never observed holding GPUs")
	})
	t.Run("the object matches the scheduler's pods", func(t *testing.T) {
		feed, st, pods, p := setup(t, true)
		// A new pod of the same name (a StatefulSet's) is on the node: the
		// object's fingerprint (of names) matches the scheduler's set, so
		// the object is taken as it is.
		again := makePod("p", 1, nil)
		again.UID, again.Spec.NodeName, again.Status.Phase = "uid-p2", "n", v1.PodRunning
		_ = pods.Delete(p)
		_ = pods.Add(again)
		feed.podDeleted(p)
		expect(t, st, all&^gpu0, "the object matches")
	})
}

// podsByNode is a pod store indexed by node name, as the informer edge's.
func podsByNode() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{nodeNameIndex: func(obj interface{}) ([]string, error) {
		if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}})
}
