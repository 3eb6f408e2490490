package nrt_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
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
	var snap podresources.Snapshot
	for i := range topo.GPUs {
		if topo.GPUs[i].PCI.Address != busIDs[i] {
			t.Fatalf("GPU %d at %s, want %s", i, topo.GPUs[i].PCI.Address, busIDs[i])
		}
		topo.GPUs[i].UUID = uuids[i] // the mock's UUIDs are its own
		snap.Allocatable = append(snap.Allocatable, podresources.Device{Resource: "nvidia.com/gpu", ID: uuids[i]})
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
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("object (-real host, +replay):\n%s", diff)
	}
}
