package nrt

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	"sigs.k8s.io/yaml"

	goldenfile "github.com/nicaffinity/nicaffinity/internal/golden"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

var update = flag.Bool("update", false, "rewrite golden files")

// h100 is the HGX H100 fixture with NVML identities: UUIDs GPU-h100-<i>, NV18.
func h100(t *testing.T, mutate func(*machines.Tree)) *topology.Topology {
	t.Helper()
	tree := machines.New(t.TempDir())
	machines.HGXH100(tree)
	if mutate != nil {
		mutate(tree)
	}
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	host, err := sysfs.New(sysfs.WithRoot(tree.Root)).Read()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := topology.FromHostData(host)
	if err != nil {
		t.Fatal(err)
	}
	host.NVML = &topology.NVMLData{}
	for i, g := range plain.GPUs {
		host.NVML.GPUs = append(host.NVML.GPUs, topology.NVMLGPU{Index: i, UUID: fmt.Sprintf("GPU-h100-%d", i), Name: "NVIDIA H100 80GB HBM3", BusID: g.PCI.Address, MemoryNUMANode: -1})
		for j := i + 1; j < len(plain.GPUs); j++ {
			host.NVML.NVLinks = append(host.NVML.NVLinks, topology.NVLink{GPU: i, Peer: j, Count: 18})
		}
	}
	topo, err := topology.FromHostData(host)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func gpuDevices(topo *topology.Topology, skip ...int) []devices.Device {
	var out []devices.Device
	for i, g := range topo.GPUs {
		if contains(skip, i) {
			continue
		}
		out = append(out, devices.Device{Resource: "nvidia.com/gpu", ID: g.UUID, NUMANodes: []int{topology.NUMAOf(g.PCI)}})
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func zone(t *testing.T, obj *v1alpha2.NodeResourceTopology, name string) v1alpha2.Zone {
	t.Helper()
	for _, z := range obj.Zones {
		if z.Name == name {
			return z
		}
	}
	t.Fatalf("no zone %s", name)
	return v1alpha2.Zone{}
}

func res(z v1alpha2.Zone, name string) string {
	for _, r := range z.Resources {
		if r.Name == name {
			return fmt.Sprintf("%s/%s/%s", r.Capacity.String(), r.Allocatable.String(), r.Available.String())
		}
	}
	return "absent"
}

func attr(list v1alpha2.AttributeList, name string) string {
	for _, a := range list {
		if a.Name == name {
			return a.Value
		}
	}
	return ""
}

func cost(z v1alpha2.Zone, name string) int64 {
	for _, c := range z.Costs {
		if c.Name == name {
			return c.Value
		}
	}
	return -1
}

// TestBuildHGXH100 is an 8-GPU, 8-NIC node with one pod on GPU 0, GPU 5 gone
// from the device plugin (fallen off the bus), mlx5_6 down, and a pod holding
// a device ID that is no GPU here.
func TestBuildHGXH100(t *testing.T) {
	topo := h100(t, func(tree *machines.Tree) {
		tree.WriteFile("class/infiniband/mlx5_6/ports/1/state", "1: DOWN")
	})
	snap := devices.Snapshot{
		Pods: []devices.Pod{
			{Namespace: "team-a", Name: "train-0", Devices: []devices.Device{{Resource: "nvidia.com/gpu", ID: "GPU-h100-0", NUMANodes: []int{0}}, {Resource: "rdma/hca", ID: "hca", NUMANodes: []int{0}}}},
			{Namespace: "team-b", Name: "stale", Devices: []devices.Device{{Resource: "nvidia.com/gpu", ID: "GPU-gone"}}},
			{Namespace: "kube-system", Name: "exporter"},
		},
		Allocatable: append(gpuDevices(topo, 5), devices.Device{Resource: "rdma/hca", ID: "hca", NUMANodes: []int{0}}),
	}
	obj, problems := Build(Input{Node: "node-a", Topology: topo, Snapshot: snap, Resources: DefaultResources()})

	if got := res(zone(t, obj, "node-0"), "nvidia.com/gpu"); got != "4/4/3" {
		t.Errorf("node-0 GPUs capacity/allocatable/available = %s, want 4/4/3", got)
	}
	// Devices count as the kubelet reports them (GPU 5 is not offered), as
	// the Resource Topology Exporter counts them; the GPU zones keep GPU 5.
	if got := res(zone(t, obj, "node-1"), "nvidia.com/gpu"); got != "3/3/3" {
		t.Errorf("node-1 GPUs = %s, want 3/3/3", got)
	}
	if got := res(zone(t, obj, "node-0"), "rdma/hca"); got != "1/1/0" {
		t.Errorf("node-0 rdma/hca = %s, want 1/1/0", got)
	}
	g5 := zone(t, obj, "gpu-5")
	if attr(g5.Attributes, AttrHealth) != HealthMissing || res(g5, "nvidia.com/gpu") != "1/0/0" {
		t.Errorf("gpu-5 = %+v, want health missing and 1/0/0", g5)
	}
	g0 := zone(t, obj, "gpu-0")
	if res(g0, "nvidia.com/gpu") != "1/1/0" || attr(g0.Attributes, AttrUUID) != "GPU-h100-0" {
		t.Errorf("gpu-0 = %+v", g0)
	}
	for name, want := range map[string]int64{"nic-mlx5_0": 10, "nic-mlx5_1": 40, "nic-mlx5_4": 50, "gpu-1": 5, "nic-mlx5_6": -1} {
		if got := cost(g0, name); got != want {
			t.Errorf("gpu-0 cost to %s = %d, want %d", name, got, want)
		}
	}
	if got := attr(zone(t, obj, "nic-mlx5_6").Attributes, AttrState); got != "DOWN" {
		t.Errorf("nic-mlx5_6 state = %q", got)
	}
	sw := zone(t, obj, g0.Parent)
	if sw.Type != ZonePCIeSwitch || sw.Parent != "node-0" || attr(sw.Attributes, AttrPCIeRoot) != "pci0000:10" || zone(t, obj, "nic-mlx5_0").Parent != sw.Name {
		t.Errorf("GPU 0 and mlx5_0 are not under one switch zone on pci0000:10: %+v", sw)
	}
	fp := podfingerprint.NewFingerprint(3)
	for _, p := range snap.Pods {
		_ = fp.Add(p.Namespace, p.Name)
	}
	if got := attr(obj.Attributes, podfingerprint.Attribute); got != fp.Sign() {
		t.Errorf("fingerprint %q, want %q", got, fp.Sign())
	}
	var text []string
	for _, p := range problems {
		text = append(text, p.String())
	}
	for _, want := range []string{"GPU 5 (0000:b5:00.0): the device plugin does not offer it", `pod team-b/stale holds nvidia.com/gpu device "GPU-gone"`, "RDMA device mlx5_6: no port is ACTIVE"} {
		if !strings.Contains(strings.Join(text, "\n"), want) {
			t.Errorf("problems %q lack %q", text, want)
		}
	}
	// Parents come before children.
	seen := map[string]bool{}
	for _, z := range obj.Zones {
		if z.Parent != "" && !seen[z.Parent] {
			t.Errorf("zone %s comes before its parent %s", z.Name, z.Parent)
		}
		seen[z.Name] = true
	}
}

// TestBuildDRAPublishedGPUs: on a node whose GPUs a DRA driver publishes
// and no device plugin offers, the GPUs are not reported missing; one that
// neither offers still is.
func TestBuildDRAPublishedGPUs(t *testing.T) {
	topo := h100(t, nil)
	var published []string
	for _, g := range topo.GPUs[1:] {
		published = append(published, strings.ToUpper(g.PCI.Address)) // any spelling
	}
	_, problems := Build(Input{Node: "n", Topology: topo, Resources: DefaultResources(), DRAPublished: published})
	var got []string
	for _, p := range problems {
		if strings.HasPrefix(p.Device, "GPU ") {
			got = append(got, p.Device)
		}
	}
	want := []string{fmt.Sprintf("GPU 0 (%s)", topo.GPUs[0].PCI.Address)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUs reported missing (-want,+got):\n%s", diff)
	}
}

// TestBuildGolden pins the whole object of an idle HGX H100 node; the same
// object is the example in docs/nrt-schema.md.
func TestBuildGolden(t *testing.T) {
	topo := h100(t, nil)
	obj, problems := Build(Input{Node: "gpu-node-1", Topology: topo, Resources: DefaultResources(),
		Snapshot: devices.Snapshot{Allocatable: gpuDevices(topo)}})
	if len(problems) != 0 {
		t.Errorf("problems on a healthy node: %v", problems)
	}
	got, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	goldenfile.Check(t, filepath.Join("testdata", "hgx-h100-idle.yaml"), got, *update)
}

// TestBuildSRIOV counts VFs per PF and per NUMA node, and a VF of no known PF
// is a problem, not a crash.
func TestBuildSRIOV(t *testing.T) {
	tree := machines.New(t.TempDir())
	tree.NUMANode(0, "0-7")
	tree.GPU("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", 0, "0-7")
	pf := "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
	tree.NIC(pf, "mlx5_0", 0, machines.ActiveRoCE)
	var vfs []string
	for i := 2; i < 5; i++ {
		vf := fmt.Sprintf("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.%d", i)
		tree.PCI(vf, machines.Func{Vendor: machines.VendorMellanox, Device: 0x101e, Class: machines.ClassEther})
		vfs = append(vfs, vf)
	}
	tree.SRIOV(pf, 8, vfs...)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
	if err != nil {
		t.Fatal(err)
	}
	const vfRes = "openshift.io/sriov_highnet"
	snap := devices.Snapshot{
		Allocatable: []devices.Device{
			{Resource: "nvidia.com/gpu", ID: "0000:03:00.0"},
			{Resource: vfRes, ID: "0000:04:00.2", NUMANodes: []int{0}}, {Resource: vfRes, ID: "0000:04:00.3", NUMANodes: []int{0}}, {Resource: vfRes, ID: "0000:04:00.4", NUMANodes: []int{0}},
			{Resource: vfRes, ID: "0000:99:00.1"},
		},
		Pods: []devices.Pod{{Namespace: "a", Name: "p", Devices: []devices.Device{{Resource: "nvidia.com/gpu", ID: "0000:03:00.0"}, {Resource: vfRes, ID: "0000:04:00.3", NUMANodes: []int{0}}}}},
	}
	obj, problems := Build(Input{Node: "n", Topology: topo, Snapshot: snap, Resources: DefaultResources()})
	if got := res(zone(t, obj, "nic-mlx5_0"), vfRes); got != "3/3/2" {
		t.Errorf("nic-mlx5_0 VFs = %s, want 3/3/2", got)
	}
	if got := res(zone(t, obj, "node-0"), vfRes); got != "3/3/2" {
		t.Errorf("node-0 VFs = %s, want 3/3/2", got)
	}
	if got := res(zone(t, obj, "gpu-0"), "nvidia.com/gpu"); got != "1/1/0" {
		t.Errorf("gpu-0 (matched by bus ID) = %s, want 1/1/0", got)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].Reason, "not a VF of any RDMA device") {
		t.Errorf("problems = %v", problems)
	}
}

// TestNUMAZones works the Node zones out by hand on a two-socket machine
// with the CPU manager and memory manager static: what NodeResourceTopologyMatch
// reads must be what the Resource Topology Exporter would publish.
func TestNUMAZones(t *testing.T) {
	const gib = int64(1) << 30
	topo := &topology.Topology{NUMANodes: []topology.NUMANode{
		{ID: 0, CPUs: "0-3,8-11", Distances: []int{10, 21}, MemoryBytes: 64 * gib, HugePages: []topology.HugePages{{PageBytes: 2 << 20, Count: 512}, {PageBytes: gib, Count: 4}}},
		{ID: 1, CPUs: "4-7,12-15", Distances: []int{21, 10}, MemoryBytes: 64 * gib},
		{ID: 2, CPUs: "", Distances: []int{30, 30, 10}}, // a memory-only node (CXL)
	}}
	snap := devices.Snapshot{
		// CPUs 0 and 4 are reserved for the system: not allocatable.
		AllocatableCPUs: []int{1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		AllocatableMemory: []devices.Memory{
			{Type: "memory", Bytes: 62 * gib, NUMANodes: []int{0}},
			{Type: "memory", Bytes: 63 * gib, NUMANodes: []int{1}},
			{Type: "hugepages-1Gi", Bytes: 4 * gib, NUMANodes: []int{0}},
		},
		Allocatable: []devices.Device{
			{Resource: "nvidia.com/gpu", ID: "GPU-0", NUMANodes: []int{0}},
			{Resource: "nvidia.com/gpu", ID: "GPU-1", NUMANodes: []int{1}},
			{Resource: "example.com/no-numa", ID: "x"},
		},
		Pods: []devices.Pod{
			{Namespace: "a", Name: "guaranteed", CPUs: []int{1, 2}, Devices: []devices.Device{{Resource: "nvidia.com/gpu", ID: "GPU-0", NUMANodes: []int{0}}},
				Memory: []devices.Memory{{Type: "memory", Bytes: 8 * gib, NUMANodes: []int{0}}, {Type: "hugepages-1Gi", Bytes: 2 * gib, NUMANodes: []int{0}}}},
			{Namespace: "a", Name: "spread", CPUs: []int{5}, Memory: []devices.Memory{{Type: "memory", Bytes: 70 * gib, NUMANodes: []int{0, 1}}}},
		},
	}
	// Quantities are in bytes, DecimalSI, as the Resource Topology Exporter writes them.
	zones, problems := numaZones(topo, snap)
	if len(problems) != 0 {
		t.Errorf("problems: %v", problems)
	}
	type row struct{ zone, res, got string }
	var got []row
	for _, z := range zones {
		for _, r := range z.Resources {
			got = append(got, row{z.Name, r.Name, res(z, r.Name)})
		}
	}
	want := []row{
		{"node-0", "cpu", "8/7/5"},
		{"node-0", "hugepages-1Gi", fmt.Sprintf("%d/%d/%d", 4*gib, 4*gib, 2*gib)},
		{"node-0", "memory", fmt.Sprintf("%d/%d/0", 64*gib, 62*gib)}, // 62 - 8 - 70 (a block on two nodes counts on both), floored
		{"node-0", "nvidia.com/gpu", "1/1/0"},
		{"node-1", "cpu", "8/7/6"},
		{"node-1", "memory", fmt.Sprintf("%d/%d/0", 64*gib, 63*gib)},
		{"node-1", "nvidia.com/gpu", "1/1/1"},
		{"node-2", "cpu", "0/0/0"}, // nothing allocatable: cpu 0, as the Resource Topology Exporter publishes
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(row{})); diff != "" {
		t.Errorf("Node zones (-want,+got):\n%s", diff)
	}
	if c := cost(zones[1], "node-0"); c != 21 {
		t.Errorf("node-1 cost to node-0 = %d, want 21", c)
	}

	// A CPU the kubelet offers that no NUMA node lists is a problem, not a crash.
	snap.AllocatableCPUs = append(snap.AllocatableCPUs, 99)
	if _, problems := numaZones(topo, snap); len(problems) != 1 || !strings.Contains(problems[0].String(), "CPU 99: the kubelet offers it but no NUMA node lists it") {
		t.Errorf("problems = %v", problems)
	}
}

// TestFingerprintLeavesOutAdmitting: a pod the kubelet lists before its
// devices are allocated is not in the object's pod-set fingerprint, so a
// scheduler keeps its reservation for it; once counted it is.
func TestFingerprintLeavesOutAdmitting(t *testing.T) {
	topo := h100(t, nil)
	snap := devices.Snapshot{Pods: []devices.Pod{{Namespace: "ml", Name: "done"}, {Namespace: "ml", Name: "admitting"}}}
	fp := func(admitting map[string]bool) string {
		obj, _ := Build(Input{Node: "n", Topology: topo, Snapshot: snap, Resources: DefaultResources(), Admitting: admitting})
		return AttrValue(obj.Attributes, "nodeTopologyPodsFingerprint")
	}
	if got, want := fp(map[string]bool{"ml/admitting": true}), Fingerprint(snap.Pods[:1]); got != want {
		t.Errorf("with ml/admitting admitting: fingerprint %s, want that of ml/done alone %s", got, want)
	}
	if got, want := fp(nil), Fingerprint(snap.Pods); got != want {
		t.Errorf("with none admitting: fingerprint %s, want that of both %s", got, want)
	}
}
