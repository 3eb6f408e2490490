//go:build !race

package nicaffinity

import (
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

// readyNRT publishes an HGX H100 whose GPUDirect facts are all readable and
// good, after breaking it with brk (nil: not broken), on kernel 6.8, with
// every GPU but GPU 0 taken.
func readyNRT(t *testing.T, node string, brk func(*machines.Tree)) *v1alpha2.NodeResourceTopology {
	t.Helper()
	tree := machines.New(t.TempDir())
	machines.HGXH100(tree)
	tree.GPUDirectReady()
	if brk != nil {
		brk(tree)
	}
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root), sysfs.WithKernelRelease("6.8.0-45-generic")).Discover()
	if err != nil {
		t.Fatal(err)
	}
	return buildNRT(node, topo, nil, 1, 2, 3, 4, 5, 6, 7)
}

// acsAboveGPU0 turns ACS redirect on at the downstream port GPU 0 hangs
// from: between GPU 0 and its PIX NIC.
func acsAboveGPU0(ctrl uint16) func(*machines.Tree) {
	return func(tr *machines.Tree) { tr.ACS(tr.BridgeAbove(tr.GPUAddresses()[0]), ctrl) }
}

// TestFilterGPUDirect: a path on which GPUDirect RDMA cannot run is not
// aligned under required, whatever its PCIe level, and the reason names
// the cause.
func TestFilterGPUDirect(t *testing.T) {
	noPeerMem := func(taint string) func(*machines.Tree) {
		return func(tr *machines.Tree) {
			tr.RemoveModule("nvidia_peermem")
			tr.Module("nvidia", taint)
		}
	}
	tests := []struct {
		name     string
		brk      func(*machines.Tree)
		maxLevel string
		wantCode fwk.Code
		wantMsg  string
	}{
		{name: "ready: PIX passes"},
		{name: "ACS redirect between GPU 0 and its NIC", brk: acsAboveGPU0(topology.ACSRedirectBits),
			wantCode: fwk.Unschedulable, wantMsg: "none of the 1 free GPUs has a NIC at PXB or closer; GPUDirect RDMA impossible on closer paths: ACS redirect on 0000:14:00.0"},
		{name: "ACS capability present but redirect off", brk: acsAboveGPU0(0x11)},
		{name: "ACS redirect, PHB allowed", brk: acsAboveGPU0(topology.ACSRedirectBits), maxLevel: "PHB"},
		{name: "no peermem, proprietary driver", brk: noPeerMem("POE"),
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "GPUDirect RDMA impossible on closer paths: nvidia-peermem not loaded and dma-buf not usable"},
		{name: "no peermem, open driver on 6.8: dma-buf", brk: noPeerMem("OE")},
		{name: "RoCE port without a v2 GID", brk: func(tr *machines.Tree) {
			tr.SetPort("mlx5_0", 1, "link_layer", "Ethernet")
			tr.GID("mlx5_0", 1, 0, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "IB/RoCE v1")
		}, wantCode: fwk.Unschedulable, wantMsg: "no RoCE v2 GID on mlx5_0 port 1"},
		{name: "RoCE port with a v2 GID", brk: func(tr *machines.Tree) {
			tr.SetPort("mlx5_0", 1, "link_layer", "Ethernet")
			tr.GID("mlx5_0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newTestPlugin(t, nil, readyNRT(t, "n", tc.brk))
			ann := map[string]string{}
			if tc.maxLevel != "" {
				ann[annotations.MaxLevel] = tc.maxLevel
			}
			cycle, st := preFilter(t, pl, makePod("p", 1, ann, rdma, "1"), nodeInfo("big", 16))
			if !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			got := pl.Filter(t.Context(), cycle, nil, nodeInfo("n", 8))
			if got.Code() != tc.wantCode || !strings.Contains(got.Message(), tc.wantMsg) {
				t.Errorf("Filter = %v %q, want %v containing %q", got.Code(), got.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// TestScoreGPUDirect: under preferred, a node whose only free GPU has ACS
// redirect to its NIC scores below the same node without it.
func TestScoreGPUDirect(t *testing.T) {
	pl, _ := newTestPlugin(t, nil, readyNRT(t, "ready", nil), readyNRT(t, "acs", acsAboveGPU0(topology.ACSRedirectBits)))
	pod := makePod("p", 1, map[string]string{annotations.Policy: "preferred"}, rdma, "1")
	score := func(node string) int64 {
		cycle, _ := preFilter(t, pl, pod, nodeInfo("big", 16))
		s, st := pl.Score(t.Context(), cycle, pod, nodeInfo(node, 8))
		if !st.IsSuccess() {
			t.Fatal(st)
		}
		return s
	}
	if ready, acs := score("ready"), score("acs"); ready <= acs {
		t.Errorf("score with GPUDirect possible %d, with ACS redirect %d: want the first higher", ready, acs)
	}
}
