package nrt

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines/machinestest"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestBuildGPUDirect: the readiness facts that are known are published
// (object attributes, NIC zone attributes, acsRedirect on the GPU zones it
// concerns), the problems name them, and Compile turns them back into
// blocked paths with their reasons.
func TestBuildGPUDirect(t *testing.T) {
	topo := h100(t, machinestest.ReadyHGXH100("acs-redirect", "no-peermem", "roce-no-v2-gid"))
	snap := devices.Snapshot{Allocatable: gpuDevices(topo)}
	obj, problems := Build(Input{Node: "n", Topology: topo, Snapshot: snap, Resources: DefaultResources()})

	attrs := map[string]string{}
	for _, a := range obj.Attributes {
		attrs[a.Name] = a.Value
	}
	if diff := cmp.Diff(map[string]string{AttrPeerMem: "absent", AttrDMABuf: "no", AttrIOMMU: "off"},
		map[string]string{AttrPeerMem: attrs[AttrPeerMem], AttrDMABuf: attrs[AttrDMABuf], AttrIOMMU: attrs[AttrIOMMU]}); diff != "" {
		t.Errorf("object attributes (-want,+got):\n%s", diff)
	}
	zoneAttr := func(zone, name string) string {
		for _, z := range obj.Zones {
			if z.Name == zone {
				return AttrValue(z.Attributes, name)
			}
		}
		return ""
	}
	if got := zoneAttr("gpu-0", AttrACSRedirect); got != "mlx5_0=0000:14:00.0" {
		t.Errorf("gpu-0 %s = %q", AttrACSRedirect, got)
	}
	if got := zoneAttr("gpu-1", AttrACSRedirect); got != "" {
		t.Errorf("gpu-1 %s = %q, want none", AttrACSRedirect, got)
	}
	for _, want := range [][2]string{{AttrRoCEv2, "no"}, {AttrPhysState, "LinkUp"}, {AttrLinkLayer, "Ethernet"}} {
		if got := zoneAttr("nic-mlx5_0", want[0]); got != want[1] {
			t.Errorf("nic-mlx5_0 %s = %q, want %q", want[0], got, want[1])
		}
	}
	var text []string
	for _, p := range problems {
		text = append(text, p.String())
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{"GPUDirect RDMA cannot run: nvidia-peermem not loaded and dma-buf not usable", "ACS redirects peer-to-peer traffic to its NICs: mlx5_0=0000:14:00.0", "no RoCE v2 GID on mlx5_0 port 1"} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}

	c, err := Compile(obj, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	if c.HostBlock == "" || c.GPUs[3].Blocked[3] != c.HostBlock || c.GPUs[3].Level[3] != topology.LevelPHB || c.GPUs[3].Published[3] != topology.LevelPIX {
		t.Errorf("host block %q; gpu-3 to mlx5_3: blocked %q, level %v, published %v", c.HostBlock, c.GPUs[3].Blocked[3], c.GPUs[3].Level[3], c.GPUs[3].Published[3])
	}
	if c.GPUs[3].Level[7] != topology.LevelSYS {
		t.Errorf("a SYS path stays SYS when blocked, got %v", c.GPUs[3].Level[7])
	}
}

// TestCompileGPUDirectAlone: each fact on its own, on the idle golden
// object, blocks exactly the paths it concerns.
func TestCompileGPUDirectAlone(t *testing.T) {
	tests := []struct {
		name        string
		mutate      func(o *v1alpha2.NodeResourceTopology)
		wantBlocked map[[2]int]string // (gpu, nic) -> reason
	}{
		{"nothing published", func(*v1alpha2.NodeResourceTopology) {}, map[[2]int]string{}},
		{"peermem absent, dma-buf unknown", func(o *v1alpha2.NodeResourceTopology) {
			o.Attributes = append(o.Attributes, v1alpha2.AttributeInfo{Name: AttrPeerMem, Value: "absent"})
		}, map[[2]int]string{}},
		{"ACS on gpu-2 to mlx5_2", func(o *v1alpha2.NodeResourceTopology) {
			z := zoneNamed(o, "gpu-2")
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrACSRedirect, Value: "mlx5_2=34:00.0,mlx5_ghost=0000:00:01.0"})
		}, map[[2]int]string{{2, 2}: "ACS redirect on 0000:34:00.0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := golden(t)
			tc.mutate(o)
			c, err := Compile(o, "nvidia.com/gpu")
			if err != nil {
				t.Fatal(err)
			}
			got := map[[2]int]string{}
			for g, gpu := range c.GPUs {
				for n, why := range gpu.Blocked {
					if why != "" {
						got[[2]int{g, n}] = why
					}
				}
			}
			if diff := cmp.Diff(tc.wantBlocked, got); diff != "" {
				t.Errorf("blocked paths (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestCompileBadACSRedirect(t *testing.T) {
	for _, tc := range []struct{ value, wantErr string }{
		{"mlx5_0", `entry "mlx5_0" is not <rdma device>=<bridge PCI address>`},
		{"=0000:14:00.0", "is not <rdma device>"},
		{"mlx5_0=not-an-address", "is not <rdma device>"},
		{strings.Repeat("mlx5_0=0000:14:00.0,", 70), "entries, at most 64"},
	} {
		t.Run(tc.value[:min(len(tc.value), 20)], func(t *testing.T) {
			o := golden(t)
			z := zoneNamed(o, "gpu-0")
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrACSRedirect, Value: tc.value})
			_, err := Compile(o, "nvidia.com/gpu")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "GPU zone gpu-0") {
				t.Errorf("err = %v, want one naming gpu-0 and containing %q", err, tc.wantErr)
			}
		})
	}
}
