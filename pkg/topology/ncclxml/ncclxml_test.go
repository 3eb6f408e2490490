package ncclxml_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/ncclxml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func load(t *testing.T, name string) *topology.Topology {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "profiles", "nccl-xml", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topo, err := ncclxml.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return topo
}

func render(topo *topology.Topology) string {
	var b strings.Builder
	b.WriteString(topo.Matrix().Format())
	b.WriteString("\nNotes:\n")
	for _, n := range topo.Notes {
		b.WriteString("  " + n + "\n")
	}
	return b.String()
}

// TestGolden imports every published XML and compares the matrix we print with
// the golden file next to it (go test -update rewrites them).
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("../../profiles/nccl-xml/*.xml")
	if err != nil || len(files) < 13 {
		t.Fatalf("want the 13 published XMLs under testdata, got %d (%v)", len(files), err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".xml"), func(t *testing.T) {
			got := render(load(t, name))
			golden := filepath.Join("testdata", strings.TrimSuffix(name, ".xml")+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s (-want,+got):\n%s", golden, diff)
			}
		})
	}
}

// TestReading pins the cells that say how the XML is read, independent of the goldens.
func TestReading(t *testing.T) {
	tests := []struct {
		file     string
		row, col string // GPUn or an RDMA device name
		want     string
		why      string
	}{
		{"oci-bm-gpu-h100-8-8gpu-8x2portcx7_oci-hpc_H100-topology.xml", "GPU0", "mlx5_0", "PIX", "PEX89xxx sub-switches fold into their parent"},
		{"oci-bm-gpu-h100-8-8gpu-8x2portcx7_oci-hpc_H100-topology.xml", "mlx5_0", "mlx5_1", "PIX", "two ports of one CX-7 function"},
		{"oci-bm-gpu-h100-8-8gpu-8x2portcx7_oci-hpc_H100-topology.xml", "GPU0", "GPU1", "NV18", "5+5+4+4 links into four NVSwitches"},
		{"oci-bm-gpu-h100-8-8gpu-8x2portcx7_oci-hpc_H100-topology.xml", "GPU0", "mlx5_3", "PHB", "another switch under the same <cpu>"},
		{"alibaba-hgx-a100-8gpu-5bondnic_SimAI_topo_8A100_4CX6.xml", "GPU1", "mlx5_bond_1", "PXB", "PEX88096 is not folded: the GPU is two switches down"},
		{"alibaba-hgx-a100-8gpu-5bondnic_SimAI_topo_8A100_4CX6.xml", "GPU0", "mlx5_bond_0", "PHB", "NIC straight on the CPU"},
		{"alibaba-hgx-a100-8gpu-5bondnic_SimAI_topo_8A100_4CX6.xml", "GPU0", "GPU1", "NV12", "2 links to each of six NVSwitches"},
		{"a100pcie-2gpu-1cx6dx-icelake_nccl-issue-2397.xml", "GPU0", "mlx5_0", "PHB", "same <cpu>, no shared bridge: NCCL's PHB"},
		{"a100pcie-2gpu-1cx6dx-icelake_nccl-issue-2397.xml", "GPU1", "mlx5_0", "SYS", "different <cpu>"},
		{"a100pcie-2gpu-1cx6dx-icelake_nccl-issue-2397.xml", "GPU0", "GPU1", "SYS", "no NVLink"},
		{"azure-ndv4-a100-8gpu_azhpc-images_ndv4-topo.xml", "GPU2", "0103:00:00.0", "PIX", "no <gpu> elements: GPUs in bus order, GPU2 is 0003:00:00.0, sibling of 0103 under a synthetic bridge"},
		{"azure-ndv4-a100-8gpu_azhpc-images_ndv4-topo.xml", "GPU0", "0103:00:00.0", "SYS", "GPU0 is 0001:00:00.0, on another NUMA node"},
		{"azure-nc-a100-v4-4gpu_azhpc-images_ncv4-topo.xml", "GPU0", "GPU1", "SYS", "self-targeted nvlink is ignored"},
		{"oci-hgx-b300-8gpu-8cx8vf_oci-hpc_B300MP.xml", "GPU0", "rdma_vf_rail0", "PXB", "the GPU sits behind a second CX-8 bridge inside the switch that holds the NIC"},
		{"oci-gb300-2x4gpu-cx8vf-mnnvl_oci-hpc_GB300MP.xml", "GPU0", "GPU4", "NV18", "MNNVL across the two trays"},
	}
	for _, tc := range tests {
		t.Run(tc.file+"/"+tc.row+"-"+tc.col, func(t *testing.T) {
			m := load(t, tc.file).Matrix()
			find := func(key string) int {
				for i, d := range m.Devices {
					if d.Label == key || (!d.IsGPU() && d.Name == key) {
						return i
					}
				}
				t.Fatalf("no device %s in %v", key, m.Devices)
				return -1
			}
			if got := m.Cells[find(tc.row)][find(tc.col)].String(); got != tc.want {
				t.Errorf("%s-%s = %s, want %s (%s)", tc.row, tc.col, got, tc.want, tc.why)
			}
		})
	}
}
