package nrt

import (
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

func problemsSay(ps []Problem, want string) bool {
	for _, p := range ps {
		if strings.Contains(p.Reason, want) {
			return true
		}
	}
	return false
}

// TestBuilderPieces: each step of Build on an HGX H100, with the problem it
// reports for bad input.
func TestBuilderPieces(t *testing.T) {
	topo := h100(t, func(tree *machines.Tree) { tree.SetPort("mlx5_1", 1, "state", "1: DOWN") })
	gpu := func(i int) devices.Device {
		return devices.Device{Resource: "nvidia.com/gpu", ID: topo.GPUs[i].PCI.Address}
	}
	in := Input{Node: "n", Topology: topo, Resources: DefaultResources()}
	for i := 1; i < len(topo.GPUs); i++ {
		in.Snapshot.Allocatable = append(in.Snapshot.Allocatable, gpu(i))
	}
	in.Snapshot.Allocatable = append(in.Snapshot.Allocatable, devices.Device{Resource: "nvidia.com/gpu", ID: "GPU-nowhere"},
		devices.Device{Resource: "openshift.io/sriov_highnet", ID: "0000:ee:00.2"})
	in.Snapshot.Pods = []devices.Pod{{Namespace: "ml", Name: "p", Devices: []devices.Device{gpu(2), {Resource: "nvidia.com/gpu", ID: "GPU-ghost"}}}}
	in.Claimed = []string{topo.GPUs[3].PCI.Address}
	b := &builder{in: in, t: topo, devs: NewDevices(topo)}

	b.readOffered()
	if b.gpuHealthy[0] || !b.gpuHealthy[1] {
		t.Errorf("healthy %v: GPU 0 is not offered, GPU 1 is", b.gpuHealthy)
	}
	for _, want := range []string{`offers nvidia.com/gpu device "GPU-nowhere", which is no GPU`, "the device plugin does not offer it"} {
		if !problemsSay(b.problems, want) {
			t.Errorf("readOffered: no problem saying %q in %v", want, b.problems)
		}
	}
	vfUsed, claimedVF := b.readHeld()
	if !b.gpuUsed[2] || !b.gpuUsed[3] || b.gpuUsed[1] || len(vfUsed)+len(claimedVF) != 0 {
		t.Errorf("used %v: GPU 2 held by a pod, GPU 3 by a claim", b.gpuUsed)
	}
	if !problemsSay(b.problems, `pod ml/p holds nvidia.com/gpu device "GPU-ghost"`) {
		t.Errorf("readHeld: %v", b.problems)
	}
	b.readNICs()
	if b.nicUp[1] || !b.nicUp[0] || !problemsSay(b.problems, "RDMA device mlx5_1: ") && !problemsSay(b.problems, "no port is ACTIVE") {
		t.Errorf("readNICs: up %v, problems %v", b.nicUp, b.problems)
	}
	b.readVFPools(vfUsed, claimedVF)
	if !problemsSay(b.problems, `"0000:ee:00.2" is not a VF of any RDMA device`) || len(b.pfPools) != 0 {
		t.Errorf("readVFPools: pools %v, problems %v", b.pfPools, b.problems)
	}
	if obj := b.header(); obj.Name != "n" || AttrValue(obj.Attributes, AttrSchema) != SchemaVersion {
		t.Errorf("header: %+v", obj)
	}
	switches := b.switchZones()
	if len(switches) == 0 || switches[0].Type != ZonePCIeSwitch {
		t.Errorf("switch zones: %+v", switches)
	}
	gpus, nics := b.gpuZones(), b.nicZones()
	if len(gpus) != len(topo.GPUs) || len(nics) == 0 {
		t.Fatalf("%d GPU zones, %d NIC zones", len(gpus), len(nics))
	}
	for _, c := range gpus[0].Costs {
		if c.Name == NICZoneName("mlx5_1") {
			t.Errorf("GPU 0 has a cost to the NIC that is down")
		}
	}
	if AttrValue(gpus[0].Attributes, AttrHealth) != HealthMissing || gpus[2].Resources[0].Available.Value() != 0 {
		t.Errorf("GPU 0 health %q, GPU 2 available %v", AttrValue(gpus[0].Attributes, AttrHealth), gpus[2].Resources[0].Available)
	}
}
