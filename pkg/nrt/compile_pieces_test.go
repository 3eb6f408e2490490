package nrt

import (
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func gpuZone(name, parent string, costs ...v1alpha2.CostInfo) v1alpha2.Zone {
	q := resource.MustParse("1")
	return v1alpha2.Zone{Name: name, Type: ZoneGPU, Parent: parent, Costs: costs,
		Resources: v1alpha2.ResourceInfoList{{Name: "nvidia.com/gpu", Capacity: q, Allocatable: q, Available: q}}}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestReadAttributes: the schema decides whose object it is; the heartbeat
// must be a time.
func TestReadAttributes(t *testing.T) {
	schema := v1alpha2.AttributeInfo{Name: AttrSchema, Value: SchemaVersion}
	for _, tc := range []struct {
		name string
		obj  v1alpha2.NodeResourceTopology
		want string
	}{
		{"ours", v1alpha2.NodeResourceTopology{Attributes: v1alpha2.AttributeList{schema}}, ""},
		{"another writer's", v1alpha2.NodeResourceTopology{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "nfd"}}}}, `written by "nfd"`},
		{"another schema", v1alpha2.NodeResourceTopology{Attributes: v1alpha2.AttributeList{{Name: AttrSchema, Value: "9"}}}, `is "9", want`},
		{"a garbled heartbeat", v1alpha2.NodeResourceTopology{Attributes: v1alpha2.AttributeList{schema, {Name: AttrHeartbeat, Value: "noon"}}}, "not an RFC 3339 time"},
	} {
		err := (&Compiled{}).readAttributes(&tc.obj)
		if got := errText(err); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestIndexZones: every zone named once.
func TestIndexZones(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zones v1alpha2.ZoneList
		want  string
	}{
		{"named once", v1alpha2.ZoneList{{Name: "a"}, {Name: "b"}}, ""},
		{"nameless", v1alpha2.ZoneList{{Name: "a"}, {}}, "zone 1 has no name"},
		{"twice", v1alpha2.ZoneList{{Name: "a"}, {Name: "a"}}, "zone a appears twice"},
	} {
		_, err := indexZones(&v1alpha2.NodeResourceTopology{Zones: tc.zones})
		if got := errText(err); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCompileNICsAndGPUs: the zone-level checks of NICs and GPUs, and a
// NIC published as down is not offered.
func TestCompileNICsAndGPUs(t *testing.T) {
	sw := v1alpha2.Zone{Name: "pcie-0", Type: ZonePCIeSwitch}
	nic := v1alpha2.Zone{Name: "nic-mlx5_0", Type: ZoneNIC, Parent: "pcie-0"}
	down := v1alpha2.Zone{Name: "nic-mlx5_1", Type: ZoneNIC, Parent: "pcie-0", Attributes: v1alpha2.AttributeList{{Name: AttrState, Value: "DOWN"}}}
	pix := v1alpha2.CostInfo{Name: "nic-mlx5_0", Value: 10}
	for _, tc := range []struct {
		name     string
		zones    v1alpha2.ZoneList
		nics     int
		want     string
		wantGPUs int
	}{
		{"a GPU next to a NIC", v1alpha2.ZoneList{sw, nic, down, gpuZone("gpu-0", "pcie-0", pix)}, 1, "", 1},
		{"a NIC not named nic-", v1alpha2.ZoneList{sw, {Name: "mlx5_0", Type: ZoneNIC, Parent: "pcie-0"}}, 0, "is not named nic-<rdma device>", 0},
		{"a NIC under no switch", v1alpha2.ZoneList{sw, {Name: "nic-mlx5_0", Type: ZoneNIC, Parent: "node-0"}}, 0, `parent "node-0" is not a PCIeSwitch zone`, 0},
		{"a GPU not named gpu-<index>", v1alpha2.ZoneList{sw, nic, gpuZone("gpu-x", "pcie-0", pix)}, 1, "is not named gpu-<index>", 0},
		{"a GPU cost that is no PCIe level", v1alpha2.ZoneList{sw, nic, gpuZone("gpu-0", "pcie-0", v1alpha2.CostInfo{Name: "nic-mlx5_0", Value: 5})}, 1, "is not a PCIe level", 0},
		{"a GPU cost to no zone", v1alpha2.ZoneList{sw, nic, gpuZone("gpu-0", "pcie-0", pix, v1alpha2.CostInfo{Name: "nic-mlx5_9", Value: 10})}, 1, "which is no zone", 0},
		{"a GPU without NIC costs", v1alpha2.ZoneList{sw, nic, gpuZone("gpu-0", "pcie-0")}, 1, "has no costs to the node's NICs", 0},
		{"a GPU without the GPU resource", v1alpha2.ZoneList{sw, nic, {Name: "gpu-0", Type: ZoneGPU, Parent: "pcie-0", Costs: v1alpha2.CostList{pix}}}, 1, "has no nvidia.com/gpu resource", 0},
	} {
		obj := &v1alpha2.NodeResourceTopology{Zones: tc.zones}
		c := &Compiled{}
		zones, _ := indexZones(obj)
		nicIndex, err := c.compileNICs(obj, zones)
		if err == nil {
			if len(c.NICs) != tc.nics {
				t.Errorf("%s: %d NICs offered, want %d", tc.name, len(c.NICs), tc.nics)
			}
			err = c.compileGPUs(obj, zones, nicIndex, "nvidia.com/gpu")
		}
		if got := errText(err); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if err == nil && len(c.GPUs) != tc.wantGPUs {
			t.Errorf("%s: %d GPUs, want %d", tc.name, len(c.GPUs), tc.wantGPUs)
		}
	}
}

// TestOrderAndDerive: GPUs listed out of order come out in index order with
// their free bits, and the near sets follow the levels.
func TestOrderAndDerive(t *testing.T) {
	c := &Compiled{NICs: []CompiledNIC{{Name: "mlx5_0", Switch: "pcie-0"}},
		GPUs: []CompiledGPU{{Zone: "gpu-1", Switch: "pcie-1", Level: []topology.Level{topology.LevelSYS}}, {Zone: "gpu-0", Switch: "pcie-0", Level: []topology.Level{topology.LevelPIX}}},
		Free: 1 << 1, Healthy: 1<<0 | 1<<1}
	c.orderGPUs()
	c.derive()
	if c.GPUs[0].Zone != "gpu-0" || c.Free != 1<<0 || c.Healthy != 3 {
		t.Fatalf("order: %s first, free %b, healthy %b", c.GPUs[0].Zone, c.Free, c.Healthy)
	}
	pix, _ := LevelIndex(topology.LevelPIX)
	sys, _ := LevelIndex(topology.LevelSYS)
	if c.AnyNear[pix] != 1 || c.AnyNear[sys] != 3 || c.BestLevel[1] != topology.LevelSYS || !c.SwitchHasNIC[c.SwitchOf[0]] || c.SwitchHasNIC[c.SwitchOf[1]] {
		t.Errorf("derive: near PIX %b, near SYS %b, best %v, switch has NIC %v", c.AnyNear[pix], c.AnyNear[sys], c.BestLevel, c.SwitchHasNIC)
	}
}
