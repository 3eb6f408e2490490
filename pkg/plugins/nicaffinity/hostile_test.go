//go:build !race

package nicaffinity

import (
	"fmt"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/topology"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// hostileNRT is the worst object for the search that Compile admits: a
// 16-GPU node with nrt.MaxNICs NICs, one free VF each, where NIC n sits
// next to a distinct pair of GPUs 0-11 only (64 of the 66 pairs), so no two
// NICs share a mask and deduplication saves nothing. A pod asking for 12
// GPUs and 5 VFs cannot fit (5 pairs cover at most 10 GPUs), and proving
// it by brute force takes C(64,5) = 7.6 million unions: far more than one
// call's budget.
func hostileNRT(node string) *v1alpha2.NodeResourceTopology {
	var pairs [][2]int
	for a := 0; a < 12; a++ {
		for b := a + 1; b < 12; b++ {
			pairs = append(pairs, [2]int{a, b})
		}
	}
	b := nrttest.MakeNRT(node).Zone(v1alpha2.Zone{Name: "node-0", Type: nrt.ZoneNode}).Zone(nrttest.Switch("pcie-0"))
	for g := 0; g < 16; g++ {
		costs := map[string]int64{}
		for n := 0; n < nrt.MaxNICs; n++ {
			costs[fmt.Sprintf("nic-mlx5_%d", n)] = 50
			if p := pairs[n]; g == p[0] || g == p[1] {
				costs[fmt.Sprintf("nic-mlx5_%d", n)] = 10
			}
		}
		b.Zone(nrttest.GPU(g, "pcie-0", true, costs))
	}
	for n := 0; n < nrt.MaxNICs; n++ {
		b.Zone(nrttest.NIC(fmt.Sprintf("mlx5_%d", n), "pcie-0", nrttest.Res(sriov, 1, 1)))
	}
	return b.Obj()
}

const sriov = "openshift.io/sriov_highnet"

// hostileRequest is the pod that makes hostileNRT's search run longest.
func hostileRequest(policy string) *v1.Pod {
	return makePod("p", 12, map[string]string{annotations.Policy: policy}, sriov, "5")
}

// TestFilterHostileObject: on the worst object Compile admits, one Filter
// call and one Score call each spend exactly one call's budget, however
// many levels and searches they try (the object's masks are all distinct,
// so the budget is reached), and the node counts as not fitting; real
// shapes still search to the end (TestFilterSRIOV, TestPrecomputedAnswers).
func TestFilterHostileObject(t *testing.T) {
	obj := hostileNRT("evil")
	pl, st := newTestPlugin(t, nil, obj)
	v, why := st.View("evil")
	if v == nil {
		t.Fatalf("hostile object does not compile: %s", why)
	}
	masks := map[nrt.GPUSet]bool{}
	for n := range v.C.NICs {
		masks[v.C.Near[placement.LevelIndex(topology.LevelPIX)][n]] = true
	}
	if len(masks) != nrt.MaxNICs {
		t.Fatalf("%d distinct masks, want %d (one per NIC)", len(masks), nrt.MaxNICs)
	}
	for _, policy := range []string{annotations.PolicyRequired, annotations.PolicyPreferred} {
		pod := hostileRequest(policy)
		cycle, _ := preFilter(t, pl, pod, nodeInfo("evil", 16), nodeInfo("bigger", 32))
		s, err := getState(cycle)
		if err != nil || s == nil {
			t.Fatalf("%s: PreFilter state %v, %v", policy, s, err)
		}
		if policy == annotations.PolicyRequired {
			steps := placement.MaxCallSteps
			got := pl.filterView(v, &s.req, &steps)
			if got.Code() != fwk.Unschedulable {
				t.Errorf("Filter = %v, want Unschedulable", got)
			}
			if steps != 0 {
				t.Errorf("Filter left %d of %d steps, want the budget reached and not passed", steps, placement.MaxCallSteps)
			}
			if f := pl.Filter(t.Context(), cycle, pod, nodeInfo("evil", 16)); f.Code() != fwk.Unschedulable {
				t.Errorf("Filter through the framework = %v", f)
			}
			continue
		}
		steps := placement.MaxCallSteps
		if score := pl.scoring.nodeScore(v, &s.req, &steps); score != 0 {
			t.Errorf("Score = %d, want 0 (no level proven)", score)
		}
		if steps != 0 {
			t.Errorf("Score left %d of %d steps over %d levels, want the budget reached and not passed", steps, placement.MaxCallSteps, len(topology.Levels))
		}
	}
	// A pod that fits is still found: 2 disjoint pairs.
	pod := makePod("fits", 4, nil, sriov, "2")
	cycle, _ := preFilter(t, pl, pod, nodeInfo("evil", 16), nodeInfo("bigger", 32))
	if f := pl.Filter(t.Context(), cycle, pod, nodeInfo("evil", 16)); !f.IsSuccess() {
		t.Errorf("4 GPUs, 2 VFs: Filter = %v, want a fit", f)
	}
	// The raw search never passes its budget either.
	var raw []nrt.GPUSet
	for m := range masks {
		raw = append(raw, m)
	}
	steps := placement.MaxCallSteps
	if placement.BestCover(raw, 5, 0, 12, &steps) || steps != 0 {
		t.Errorf("raw search: %d steps left; want no fit, budget spent and not passed", steps)
	}
}

func TestCompileCaps(t *testing.T) {
	b := nrttest.MakeNRT("n").Zone(nrttest.Switch("pcie-0"))
	for n := 0; n <= nrt.MaxNICs; n++ {
		b.Zone(nrttest.NIC(fmt.Sprintf("mlx5_%d", n), "pcie-0"))
	}
	b.Zone(nrttest.GPU(0, "pcie-0", true, map[string]int64{"nic-mlx5_0": 10}))
	if _, err := nrt.Compile(b.Obj(), "nvidia.com/gpu"); err == nil {
		t.Errorf("%d NIC zones compiled", nrt.MaxNICs+1)
	}
}

// BenchmarkFilterHostile and BenchmarkScoreHostile: one call on the
// worst object Compile admits, which spends the whole budget
// (measurements/hostile-object.md).
func BenchmarkFilterHostile(b *testing.B) {
	pl, _ := newTestPlugin(b, nil, hostileNRT("evil"))
	pod := hostileRequest(annotations.PolicyRequired)
	cycle, _ := preFilter(b, pl, pod, nodeInfo("evil", 16), nodeInfo("bigger", 32))
	node := nodeInfo("evil", 16)
	for b.Loop() {
		pl.Filter(b.Context(), cycle, pod, node)
	}
}

func BenchmarkScoreHostile(b *testing.B) {
	pl, _ := newTestPlugin(b, nil, hostileNRT("evil"))
	pod := hostileRequest(annotations.PolicyPreferred)
	cycle, _ := preFilter(b, pl, pod, nodeInfo("evil", 16), nodeInfo("bigger", 32))
	node := nodeInfo("evil", 16)
	for b.Loop() {
		pl.Score(b.Context(), cycle, pod, node)
	}
}

// FuzzBestCover: the cover search agrees with brute force on small inputs
// (up to 10 masks of 16 GPUs) and stays within its budget on any.
func FuzzBestCover(f *testing.F) {
	f.Add([]byte{3, 0, 12, 0, 48, 0, 192, 0}, uint8(2), uint8(4))
	f.Add([]byte{255, 255, 1, 0, 2, 0}, uint8(9), uint8(16))
	f.Fuzz(func(t *testing.T, raw []byte, k, want uint8) {
		var masks []nrt.GPUSet
		for i := 0; i+1 < len(raw) && len(masks) < 10; i += 2 {
			masks = append(masks, nrt.GPUSet(raw[i])|nrt.GPUSet(raw[i+1])<<8)
		}
		kk, w := int(k%12), int(want%17)
		steps := placement.MaxCallSteps
		got := placement.BestCover(masks, kk, 0, w, &steps)
		if steps <= 0 {
			t.Fatalf("%d masks spent the budget", len(masks))
		}
		brute := false
		for subset := 0; subset < 1<<len(masks) && !brute; subset++ {
			var union nrt.GPUSet
			n := 0
			for i, m := range masks {
				if subset&(1<<i) != 0 {
					union |= m
					n++
				}
			}
			brute = n <= kk && union.Count() >= w
		}
		if got != brute {
			t.Fatalf("masks %v, k %d, want %d: search %v, brute force %v", masks, kk, w, got, brute)
		}
	})
}

// BenchmarkCoverBudget is the cover search that spends its whole budget:
// the most a Filter call can cost in it.
func BenchmarkCoverBudget(b *testing.B) {
	var masks []nrt.GPUSet
	for a := 0; a < 11; a++ {
		for c := a + 1; c < 11; c++ {
			masks = append(masks, nrt.GPUSet(1)<<a|nrt.GPUSet(1)<<c)
		}
	}
	for b.Loop() {
		steps := placement.MaxCallSteps
		placement.BestCover(masks, 5, 0, 11, &steps)
	}
}
