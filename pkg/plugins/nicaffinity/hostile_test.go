//go:build !race

package nicaffinity

import (
	"fmt"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
)

// hostileNRT is a 16-GPU node with 64 NICs, one free VF each, where NIC n
// sits next to GPUs n%11 and (7n+3)%11 only: 55 distinct pairs over 11
// GPUs. A pod asking for 11 GPUs and 5 VFs cannot fit (5 pairs cover at
// most 10 GPUs), and proving it by brute force takes C(55,5) = 3.5 million
// unions.
func hostileNRT(node string) *v1alpha2.NodeResourceTopology {
	b := nrttest.MakeNRT(node).Zone(v1alpha2.Zone{Name: "node-0", Type: nrt.ZoneNode}).Zone(nrttest.Switch("pcie-0"))
	for g := 0; g < 16; g++ {
		costs := map[string]int64{}
		for n := 0; n < 64; n++ {
			costs[fmt.Sprintf("nic-mlx5_%d", n)] = 50
			if g == n%11 || g == (7*n+3)%11 {
				costs[fmt.Sprintf("nic-mlx5_%d", n)] = 10
			}
		}
		b.Zone(nrttest.GPU(g, "pcie-0", true, costs))
	}
	for n := 0; n < 64; n++ {
		b.Zone(nrttest.NIC(fmt.Sprintf("mlx5_%d", n), "pcie-0", nrttest.Res(sriov, 1, 1)))
	}
	return b.Obj()
}

const sriov = "openshift.io/sriov_highnet"

// TestFilterHostileObject: the search over a hostile object stops within
// its step budget and rejects the node; real shapes still search to the
// end (TestFilterSRIOV, TestPrecomputedAnswers).
func TestFilterHostileObject(t *testing.T) {
	pl, st := newTestPlugin(t, nil, hostileNRT("evil"))
	if v, why := st.View("evil"); v == nil {
		t.Fatalf("hostile object does not compile: %s", why)
	}
	for _, tc := range []struct{ gpus, vfs int64 }{{11, 5}, {10, 9}} {
		pod := makePod("p", tc.gpus, nil, sriov, fmt.Sprint(tc.vfs))
		cycle, _ := preFilter(t, pl, pod, nodeInfo("evil", 16), nodeInfo("bigger", 32))
		start := time.Now()
		got := pl.Filter(t.Context(), cycle, pod, nodeInfo("evil", 16))
		// A hang guard, not a speed goal (BenchmarkFilterHostile measures).
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%d GPUs, %d VFs: Filter took %s", tc.gpus, tc.vfs, took)
		}
		if tc.gpus == 11 && got.Code() != fwk.Unschedulable {
			t.Errorf("%d GPUs, %d VFs: Filter = %v, want Unschedulable", tc.gpus, tc.vfs, got)
		}
		if tc.gpus == 10 && !got.IsSuccess() {
			t.Errorf("%d GPUs, %d VFs: Filter = %v, want a fit (5 disjoint pairs)", tc.gpus, tc.vfs, got)
		}
	}
	// The budget holds without deduplication too: 64 masks of one GPU
	// each would be deduplicated, so count the steps of a raw search.
	masks := make([]nrt.GPUSet, 55)
	i := 0
	for a := 0; a < 11; a++ {
		for b := a + 1; b < 11; b++ {
			masks[i] = nrt.GPUSet(1)<<a | nrt.GPUSet(1)<<b
			i++
		}
	}
	steps := maxCoverSteps
	if bestCover(masks, 5, 0, 11, &steps) || steps >= 0 {
		t.Errorf("raw search: fit %v, %d steps left; want no fit, budget spent", false, steps)
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

func BenchmarkFilterHostile(b *testing.B) {
	pl, _ := newTestPlugin(b, nil, hostileNRT("evil"))
	pod := makePod("p", 11, nil, sriov, "5")
	cycle, _ := preFilter(b, pl, pod, nodeInfo("evil", 16), nodeInfo("bigger", 32))
	node := nodeInfo("evil", 16)
	for b.Loop() {
		pl.Filter(b.Context(), cycle, pod, node)
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
		steps := maxCoverSteps
		got := bestCover(masks, kk, 0, w, &steps)
		if steps < 0 {
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
		steps := maxCoverSteps
		bestCover(masks, 5, 0, 11, &steps)
	}
}
