package nrt_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu/nvmltest"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

// TestRealHostObject replays a real machine: the sysfs snapshot of a 2x H200
// VM (pkg/topology/testdata/h200x2-vm) with NVML played by a mock (its bus
// IDs, 18 NVLinks per GPU into NVSwitches, the UUIDs its nvidia-smi -q
// printed) and the device plugin offering both GPUs by UUID must give the
// object that topology-exporter --oneshot --no-publish printed on that
// machine (testdata/real; docs/real-gpu).
func TestRealHostObject(t *testing.T) {
	host, err := sysfs.New(sysfs.WithRoot(filepath.Join("..", "topology", "testdata", "h200x2-vm", "snap"))).Read()
	if err != nil {
		t.Fatal(err)
	}
	busIDs := []string{"0000:00:06.0", "0000:00:07.0"}
	uuids := []string{"GPU-eca17ccc-4ceb-755f-ae72-f333216847a2", "GPU-befad320-cf4d-05e9-6082-5eed135367b1"}
	mock, err := nvmltest.NVSwitchServer(busIDs, 18)
	if err != nil {
		t.Fatal(err)
	}
	if host.NVML, err = nvmlgpu.New(nvmlgpu.WithNVML(mock)).Read(); err != nil {
		t.Fatal(err)
	}
	topo, err := topology.FromHostData(host)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.GPUs) != 2 {
		t.Fatalf("%d GPUs, want 2", len(topo.GPUs))
	}
	var snap devices.Snapshot
	for i := range topo.GPUs {
		if topo.GPUs[i].PCI.Address != busIDs[i] {
			t.Fatalf("GPU %d at %s, want %s", i, topo.GPUs[i].PCI.Address, busIDs[i])
		}
		topo.GPUs[i].UUID = uuids[i] // the mock's UUIDs are its own
		snap.Allocatable = append(snap.Allocatable, devices.Device{Resource: "nvidia.com/gpu", ID: uuids[i]})
	}
	got, problems := nrt.Build(nrt.Input{Node: "h200x2-vm", Topology: topo, Snapshot: snap, Resources: nrt.DefaultResources(),
		TopologyManagerPolicy: "none", TopologyManagerScope: "container"})
	if len(problems) > 0 {
		t.Errorf("problems: %v", problems)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "real", "h200x2-vm-topology-exporter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want v1alpha2.NodeResourceTopology
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatal(err)
	}
	// The capture predates the Node zones' Resource Topology Exporter
	// counting (2026-12-01): their resources now come from podresources
	// alone, and the VM's stand-in offered the GPUs without a NUMA node (the
	// VM's numa_node is -1), so the GPUs leave node-0 and the CPUs it lists
	// enter with nothing allocatable. Everything else must match the capture.
	nodeResources := cmp.FilterPath(func(p cmp.Path) bool {
		if len(p) < 3 || p.Last().String() != ".Resources" {
			return false
		}
		z, _ := p.Index(-2).Values()
		if !z.IsValid() {
			return false
		}
		zone, ok := z.Interface().(v1alpha2.Zone)
		return ok && zone.Type == nrt.ZoneNode
	}, cmp.Ignore())
	// The capture is of schema 1; schema 2 adds only optional attributes,
	// which a host without NICs has none of, so the version is all that
	// may differ.
	for i, a := range want.Attributes {
		if a.Name == nrt.AttrSchema && a.Value == "1" {
			want.Attributes[i].Value = nrt.SchemaVersion
		}
	}
	if diff := cmp.Diff(&want, got, nodeResources); diff != "" {
		t.Errorf("object (-real host, +replay):\n%s", diff)
	}
	wantNode := v1alpha2.ResourceInfoList{{Name: "cpu", Capacity: resource.MustParse("32"), Allocatable: resource.MustParse("0"), Available: resource.MustParse("0")}}
	if diff := cmp.Diff(wantNode, got.Zones[0].Resources, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("node-0 resources (-want,+got):\n%s", diff)
	}
}
