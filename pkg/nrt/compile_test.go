package nrt

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func golden(t testing.TB) *v1alpha2.NodeResourceTopology {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hgx-h100-idle.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj v1alpha2.NodeResourceTopology
	if err := yaml.UnmarshalStrict(b, &obj); err != nil {
		t.Fatal(err)
	}
	return &obj
}

func TestCompileGolden(t *testing.T) {
	c, err := Compile(golden(t), "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.GPUs) != 8 || len(c.NICs) != 8 || c.Free != 0xff || c.Healthy != 0xff {
		t.Fatalf("compiled %d GPUs, %d NICs, free %b healthy %b", len(c.GPUs), len(c.NICs), c.Free, c.Healthy)
	}
	pix, _ := LevelIndex(topology.LevelPIX)
	for n := range c.NICs {
		if c.Near[pix][n] != GPUSet(1)<<n {
			t.Errorf("NIC %s PIX set %b, want only GPU %d", c.NICs[n].Name, c.Near[pix][n], n)
		}
	}
	node, _ := LevelIndex(topology.LevelNODE)
	if c.Near[node][0] != 0x0f {
		t.Errorf("NIC mlx5_0 NODE set %b, want GPUs 0-3", c.Near[node][0])
	}
	if c.GPUs[0].Level[4] != topology.LevelSYS {
		t.Errorf("gpu-0 to mlx5_4 = %v", c.GPUs[0].Level[4])
	}
}

func TestCompileBadObjects(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(o *v1alpha2.NodeResourceTopology)
		wantErr string
	}{
		{"nil-like: no zones", func(o *v1alpha2.NodeResourceTopology) { o.Zones = nil }, "no GPU zones"},
		{"other schema", func(o *v1alpha2.NodeResourceTopology) { o.Attributes = nil }, `attribute nicaffinity.io/schema is ""`},
		{"unknown level", func(o *v1alpha2.NodeResourceTopology) { zoneNamed(o, "gpu-2").Costs[0].Value = 33 }, "GPU zone gpu-2: cost 33 to nic-mlx5_0 is not a PCIe level"},
		{"negative count", func(o *v1alpha2.NodeResourceTopology) {
			zoneNamed(o, "gpu-1").Resources[0].Available.Set(-1)
		}, "zone gpu-1: resource nvidia.com/gpu has a negative count"},
		{"available above allocatable", func(o *v1alpha2.NodeResourceTopology) {
			zoneNamed(o, "gpu-1").Resources[0].Available.Set(5)
		}, "available 5 > allocatable 1"},
		{"GPU without NIC costs", func(o *v1alpha2.NodeResourceTopology) {
			z := zoneNamed(o, "gpu-3")
			z.Costs = z.Costs[8:]
		}, "GPU zone gpu-3 has no costs to the node's NICs"},
		{"cost to a missing zone", func(o *v1alpha2.NodeResourceTopology) {
			zoneNamed(o, "gpu-3").Costs[0].Name = "nic-ghost"
		}, "cost to nic-ghost, which is no zone"},
		{"missing parent", func(o *v1alpha2.NodeResourceTopology) { zoneNamed(o, "gpu-4").Parent = "pcie-x" }, `GPU zone gpu-4: parent "pcie-x" is not a PCIeSwitch zone`},
		{"duplicate zone", func(o *v1alpha2.NodeResourceTopology) { o.Zones = append(o.Zones, o.Zones[0]) }, "zone node-0 appears twice"},
		{"GPU zone misnamed", func(o *v1alpha2.NodeResourceTopology) { zoneNamed(o, "gpu-5").Name = "gpu-five" }, "GPU zone gpu-five is not named gpu-<index>"},
		{"no GPU resource", func(o *v1alpha2.NodeResourceTopology) { zoneNamed(o, "gpu-6").Resources = nil }, "GPU zone gpu-6 has no nvidia.com/gpu resource"},
		{"Data Direct function not a PCI address", func(o *v1alpha2.NodeResourceTopology) {
			z := zoneNamed(o, "nic-mlx5_0")
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrDataDirect, Value: "next-to-gpu-0"})
		}, `NIC zone nic-mlx5_0: dataDirect "next-to-gpu-0" is not a PCI address`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := golden(t)
			tc.mutate(o)
			_, err := Compile(o, "nvidia.com/gpu")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, err := Compile(nil, "nvidia.com/gpu"); err == nil {
		t.Error("nil object compiled")
	}
}

func zoneNamed(o *v1alpha2.NodeResourceTopology, name string) *v1alpha2.Zone {
	for i := range o.Zones {
		if o.Zones[i].Name == name {
			return &o.Zones[i]
		}
	}
	panic("no zone " + name)
}

// maxErrLen bounds a Compile error: two names of MaxNameLen bytes, one
// quoted (every byte escaped at worst), and the text around them.
const maxErrLen = 2048

// FuzzCompile decodes arbitrary JSON as an NRT object and compiles it: errors
// are fine, panics are not, and what compiles is consistent.
func FuzzCompile(f *testing.F) {
	b, err := json.Marshal(golden(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	blocked := golden(f)
	blocked.Attributes = append(blocked.Attributes, v1alpha2.AttributeInfo{Name: AttrPeerMem, Value: "absent"}, v1alpha2.AttributeInfo{Name: AttrDMABuf, Value: "no"})
	z := zoneNamed(blocked, "gpu-0")
	z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrACSRedirect, Value: "mlx5_0=0000:14:00.0"})
	if b, err = json.Marshal(blocked); err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	f.Add(`{"metadata":{"name":"n"},"attributes":[{"name":"nicaffinity.io/schema","value":"1"}],"zones":[{"name":"gpu-0","type":"GPU","parent":"p"},{"name":"p","type":"PCIeSwitch"}]}`)
	f.Add(`{"metadata":{"name":"n"},"attributes":[{"name":"nicaffinity.io/schema","value":"1"}],"zones":[{"name":"gpu-0","type":"GPU","parent":"` + strings.Repeat("\\u00ff", 1500) + `"}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var obj v1alpha2.NodeResourceTopology
		if json.Unmarshal([]byte(doc), &obj) != nil {
			return
		}
		c, err := Compile(&obj, "nvidia.com/gpu")
		if err != nil {
			// The error becomes a node's topology-unknown reason (logs,
			// metrics' reasons, the doctor's report): it quotes a few
			// names of at most MaxNameLen bytes each, never the object.
			if len(err.Error()) > maxErrLen {
				t.Fatalf("error of %d bytes, at most %d: %.200s...", len(err.Error()), maxErrLen, err)
			}
			return
		}
		if c.Free&^(GPUSet(1)<<len(c.GPUs)-1) != 0 || c.Free&^c.Healthy != 0 {
			t.Fatalf("free set %b outside %d GPUs or not healthy (%b)", c.Free, len(c.GPUs), c.Healthy)
		}
		for li := range c.Near {
			if len(c.Near[li]) != len(c.NICs) {
				t.Fatalf("Near[%d] has %d entries for %d NICs", li, len(c.Near[li]), len(c.NICs))
			}
		}
		// A blocked path is never better than PHB, and never better than published.
		for g, gpu := range c.GPUs {
			for n := range gpu.Level {
				if gpu.Level[n] < gpu.Published[n] || gpu.Blocked != nil && gpu.Blocked[n] != "" && gpu.Level[n] < topology.LevelPHB {
					t.Fatalf("gpu %d nic %d: level %v, published %v, blocked %q", g, n, gpu.Level[n], gpu.Published[n], gpu.Blocked[n])
				}
			}
		}
	})
}
