package machines

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestNCCLAgreesWithLevelsWithoutC2C holds NCCL's rule to nvidia-smi's on
// every machine of the catalogue without C2C: there NCCL's default cut-off
// is PXB as well, and the two differ only in how they count (NODE is PHB
// to NCCL, a flattened Broadcom sub-switch PIX), never in which pairs get
// GPUDirect RDMA.
func TestNCCLAgreesWithLevelsWithoutC2C(t *testing.T) {
	for _, name := range Names() {
		topo, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c2c := false
		for _, g := range topo.GPUs {
			c2c = c2c || g.C2C != ""
		}
		if c2c {
			continue
		}
		m := topo.Matrix()
		for _, p := range topo.GPUDirectPairs() {
			gi, ni := -1, -1
			for i, g := range topo.GPUs {
				if g.Index == p.GPU {
					gi = i
				}
			}
			for j, n := range topo.NICs {
				if n.Name == p.NIC {
					ni = len(topo.GPUs) + j
				}
			}
			level := m.Cells[gi][ni].Level
			gdrKnownOff := topo.GPUs[gi].GDR == topology.No || topo.NICs[ni-len(topo.GPUs)].GDR == topology.No
			if level.GPUDirectCapable() != p.Eligible && p.NCCLPath != topology.PathNET && !gdrKnownOff {
				t.Errorf("%s: GPU %d - %s: nvidia-smi %s, NCCL %s eligible=%v", name, p.GPU, p.NIC, level, p.NCCLPath, p.Eligible)
			}
		}
	}
}

// TestNCCLOnGraceAndCX8 pins the machines where NCCL's rule and the
// nvidia-smi level part: each GPU's eligible NICs under NCCL's defaults.
func TestNCCLOnGraceAndCX8(t *testing.T) {
	tests := []struct {
		machine string
		want    map[int][]string
	}{
		{"gb200-tray-4gpu-8nic", map[int][]string{
			0: {"mlx5_0:P2C", "mlx5_1:P2C"}, 1: {"mlx5_0:P2C", "mlx5_1:P2C"},
			2: {"mlx5_4:P2C", "mlx5_5:P2C"}, 3: {"mlx5_4:P2C", "mlx5_5:P2C"},
		}},
		{"gh200-1gpu-4nic", map[int][]string{0: {"mlx5_0:P2C", "mlx5_1:P2C", "mlx5_2:P2C", "mlx5_3:P2C"}}},
		// Data Direct: each GPU's own NIC, measured from its Data Direct
		// function beside the GPU, as the GB300 dump below lists it.
		{"gb300-tray-4gpu-4nic-cx8-datadirect", map[int][]string{
			0: {"mlx5_0:PXB"}, 1: {"mlx5_1:PXB"}, 2: {"mlx5_2:PXB"}, 3: {"mlx5_3:PXB"},
		}},
		// ConnectX-8 as the PCIe switch: each GPU's own NIC, PXB to NCCL
		// as in the bundled dump below.
		{"hgx-b300-8gpu-8nic-cx8", map[int][]string{
			0: {"mlx5_0:PXB"}, 1: {"mlx5_1:PXB"}, 2: {"mlx5_2:PXB"}, 3: {"mlx5_3:PXB"},
			4: {"mlx5_4:PXB"}, 5: {"mlx5_5:PXB"}, 6: {"mlx5_6:PXB"}, 7: {"mlx5_7:PXB"},
		}},
		// Both hosts of the fused dump: each GPU's own NIC through the
		// ConnectX-8 switch, PXB to NCCL (PIX to nvidia-smi); the Grace's
		// other NIC is PHB, not among the GPU's closest.
		{ProfilePrefix + "oci-gb300-2x4gpu-cx8vf-mnnvl", map[int][]string{
			0: {"rdma_vf_rail1_dma@0:PXB"}, 1: {"rdma_vf_rail0_dma@0:PXB"}, 2: {"rdma_vf_rail3_dma@0:PXB"}, 3: {"rdma_vf_rail2_dma@0:PXB"},
			4: {"rdma_vf_rail1_dma@1:PXB"}, 5: {"rdma_vf_rail0_dma@1:PXB"}, 6: {"rdma_vf_rail3_dma@1:PXB"}, 7: {"rdma_vf_rail2_dma@1:PXB"},
		}},
		{ProfilePrefix + "oci-hgx-b300-8gpu-8cx8vf", map[int][]string{
			0: {"rdma_vf_rail0:PXB"}, 1: {"rdma_vf_rail1:PXB"}, 2: {"rdma_vf_rail2:PXB"}, 3: {"rdma_vf_rail3:PXB"},
			4: {"rdma_vf_rail4:PXB"}, 5: {"rdma_vf_rail5:PXB"}, 6: {"rdma_vf_rail6:PXB"}, 7: {"rdma_vf_rail7:PXB"},
		}},
	}
	for _, tc := range tests {
		topo, err := Load(tc.machine)
		if err != nil {
			t.Fatalf("%s: %v", tc.machine, err)
		}
		got := map[int][]string{}
		for _, p := range topo.GPUDirectPairs() {
			if p.Eligible {
				got[p.GPU] = append(got[p.GPU], p.NIC+":"+p.NCCLPath.String())
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: eligible NICs per GPU (-want,+got):\n%s", tc.machine, diff)
		}
	}
}

// TestNCCLAgreesWithDumps holds the computed table to what NCCL itself
// wrote into the bundled topology dumps (pkg/topology/testdata/SOURCES.md,
// section D): where a dump marks a GPU or NIC gdr="0", NCCL uses GPUDirect
// RDMA on none of its pairs, and neither does the table; where NCCL marked
// every GPU and NIC of a machine gdr="1", every GPU has an eligible NIC in
// the table, at the path its own switch gives it.
func TestNCCLAgreesWithDumps(t *testing.T) {
	tests := []struct {
		profile string
		// perGPU is how many eligible NICs each GPU has, and at which path
		// (0: no eligible pair on the machine at all).
		perGPU int
		path   topology.NCCLPath
	}{
		// NCCL 2.30 on two A100 PCIe and a CX-6 Dx, NVIDIA/nccl#2397: both
		// ports gdr="0".
		{"a100pcie-2gpu-1cx6dx-icelake", 0, 0},
		// Azure NC A100 v4: the only NIC, eth0, is gdr="0".
		{"azure-nc-a100-v4-4gpu", 0, 0},
		// GB300 (C2C), both hosts, every GPU and NIC gdr="1": each GPU's
		// own NIC through the ConnectX-8 switch.
		{"oci-gb300-2x4gpu-cx8vf-mnnvl", 1, topology.PathPXB},
		// HGX B300, every GPU and NIC gdr="1".
		{"oci-hgx-b300-8gpu-8cx8vf", 1, topology.PathPXB},
		// OCI BM.GPU.H100.8, every GPU and NIC gdr="1": each GPU's two
		// ports on the Broadcom switch it shares with them.
		{"oci-bm-gpu-h100-8-8gpu-8x2portcx7", 2, topology.PathPIX},
		// IBM Cloud gx3d H100 VSI, every GPU and NIC gdr="1".
		{"ibmcloud-gx3d-h100-8gpu-8nic-vsi", 1, topology.PathPIX},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			topo, err := Load(ProfilePrefix + tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			got := map[int][]topology.NCCLPath{}
			for _, p := range topo.GPUDirectPairs() {
				if p.Eligible {
					got[p.GPU] = append(got[p.GPU], p.NCCLPath)
				}
			}
			if tc.perGPU == 0 {
				if len(got) != 0 {
					t.Errorf("eligible pairs %v on a machine whose dump says gdr=\"0\"", got)
				}
				return
			}
			for _, g := range topo.GPUs {
				want := make([]topology.NCCLPath, tc.perGPU)
				for i := range want {
					want[i] = tc.path
				}
				if diff := cmp.Diff(want, got[g.Index]); diff != "" {
					t.Errorf("GPU %d's eligible paths (-want,+got):\n%s", g.Index, diff)
				}
			}
		})
	}
}

// TestDataDirect holds the Data Direct shape to the bundled GB300 dump,
// which lists its NICs at their Data Direct functions: each GPU's own NIC
// is PXB to NCCL (eligible) and its only closest NIC, while nvidia-smi,
// measuring from the PF, prints SYS (as on every pair of a tray whose GPU
// memory is a NUMA node of its own). The decision level is NCCL's. With
// the VPD link gone (unreadable), NCCL's rule is measured from the PF, and
// the discovery says so in a note.
func TestDataDirect(t *testing.T) {
	topo, err := Load("gb300-tray-4gpu-4nic-cx8-datadirect")
	if err != nil {
		t.Fatal(err)
	}
	type pair struct{ Smi, Align, NCCL string }
	got := map[string]pair{}
	align, paths := topo.AlignLevelsAndPaths()
	m := topo.Matrix()
	for i, g := range topo.GPUs {
		for j, n := range topo.NICs {
			if n.DataDirect == nil {
				t.Fatalf("%s has no Data Direct function", n.Name)
			}
			got[fmt.Sprintf("GPU%d-%s", g.Index, n.Name)] = pair{m.Cells[i][len(topo.GPUs)+j].Level.String(), align[i][j].String(), paths[i][j].String()}
		}
	}
	want := map[string]pair{}
	for g := 0; g < 4; g++ {
		for n := 0; n < 4; n++ {
			k := fmt.Sprintf("GPU%d-mlx5_%d", g, n)
			switch {
			case g == n:
				want[k] = pair{"SYS", "PXB", "PXB"}
			case g/2 == n/2:
				want[k] = pair{"SYS", "SYS", "PHB"}
			default:
				want[k] = pair{"SYS", "SYS", "SYS"}
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("levels (-want,+got):\n%s", diff)
	}

	// The same tray read without its VPD: no link, NCCL measures from the PF.
	dir := t.TempDir()
	tree := New(dir)
	GB300DataDirect(tree)
	files, err := filepath.Glob(filepath.Join(dir, "devices", "*", "*", "*", "vpd"))
	if err != nil {
		t.Fatal(err)
	}
	deep, _ := filepath.Glob(filepath.Join(dir, "devices", "*", "*", "*", "*", "*", "vpd"))
	files = append(files, deep...)
	if len(files) != 8 {
		t.Fatalf("found %d vpd files, want 8", len(files))
	}
	// One PF's VPD is garbage: a note naming the file, no link for it.
	sort.Strings(files)
	if err := os.WriteFile(files[0], []byte{0x82, 0xff, 0xff, 'x'}, 0o644); err != nil {
		t.Fatal(err)
	}
	broken, err := tree.Reader().Discover()
	if err != nil {
		t.Fatalf("garbage VPD failed discovery: %v", err)
	}
	linked := 0
	for _, n := range broken.NICs {
		if n.DataDirect != nil {
			linked++
		}
	}
	if notes := strings.Join(broken.Notes, "\n"); linked != 3 || !strings.Contains(notes, files[0]+": VPD resource 0x82") {
		t.Errorf("garbage VPD: %d NICs linked (want 3), notes:\n%s", linked, notes)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := tree.Reader().Discover()
	if err != nil {
		t.Fatal(err)
	}
	var eligible []string
	for _, p := range plain.GPUDirectPairs() {
		if p.GPU == 0 && p.Eligible {
			eligible = append(eligible, p.NIC+":"+p.NCCLPath.String())
		}
	}
	if diff := cmp.Diff([]string{"mlx5_0:P2C", "mlx5_1:P2C"}, eligible); diff != "" {
		t.Errorf("GPU 0 without Data Direct known (-want,+got):\n%s", diff)
	}
	notes := strings.Join(plain.Notes, "\n")
	if strings.Count(notes, "Data Direct function") != 4 {
		t.Errorf("notes do not name the 4 unlinked Data Direct functions:\n%s", notes)
	}
}
