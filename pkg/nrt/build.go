package nrt

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Input is everything one NRT object is built from.
type Input struct {
	Node     string
	Topology *topology.Topology
	Snapshot devices.Snapshot
	// Claimed are the PCI addresses of devices that pods hold through DRA
	// ResourceClaims: where the device plugins offer the same devices,
	// these are not free.
	Claimed []string
	// DRAPublished are the PCI addresses the node's DRA drivers publish in
	// ResourceSlices: a GPU there that no device plugin offers is the DRA
	// driver's to hand out, not missing.
	DRAPublished []string
	Resources    Resources
	// TopologyManagerPolicy and Scope as the kubelet is configured ("none", "container" when unknown).
	TopologyManagerPolicy string
	TopologyManagerScope  string
	// Rails says where NIC zones' rails come from (none by default).
	Rails Rails
	// Admitting are the pods ("namespace/name") the kubelet lists that do
	// not hold yet every device their spec asks for: the kubelet lists a
	// pod while it admits it, before its devices are allocated. They are
	// left out of the pod-set fingerprint, so that a scheduler that
	// compares it with the pods it sees on the node (nicaffinity's cache,
	// NodeResourceTopologyMatch's) does not take the object as counting
	// them while their devices still show as free.
	Admitting map[string]bool
}

// Problem is something about the node a human should hear of: a GPU the
// device plugin does not offer, a device ID that matches nothing, a NIC that is down.
type Problem struct {
	Device string
	Reason string
}

func (p Problem) String() string { return p.Device + ": " + p.Reason }

// Devices maps device-plugin IDs to the node's devices.
type Devices struct {
	topo *topology.Topology
	gpu  map[string]int // device ID (UUID or bus ID) -> position in topo.GPUs
	pf   map[string]int // PF address -> position in topo.NICs
	vfPF map[string]int // VF address -> position in topo.NICs of its PF
}

// NewDevices indexes a topology by the IDs device plugins use.
func NewDevices(t *topology.Topology) *Devices {
	d := &Devices{topo: t, gpu: map[string]int{}, pf: map[string]int{}, vfPF: map[string]int{}}
	for i, g := range t.GPUs {
		d.gpu[g.PCI.Address] = i
		if g.UUID != "" {
			d.gpu[g.UUID] = i
		}
	}
	for i, n := range t.NICs {
		if n.PhysFn == "" {
			d.pf[n.PCI.Address] = i
		}
		for _, vf := range n.VFs {
			d.vfPF[vf] = i
		}
	}
	return d
}

// GPU returns the GPU a device ID names (a UUID, or a PCI bus ID in any spelling).
func (d *Devices) GPU(id string) (int, bool) {
	if i, ok := d.gpu[id]; ok {
		return i, true
	}
	if bus, err := topology.NormalizeBusID(id); err == nil {
		i, ok := d.gpu[bus]
		return i, ok
	}
	return 0, false
}

// NIC returns the NIC (a PF) at a PCI address.
func (d *Devices) NIC(id string) (int, bool) { return byBus(d.pf, id) }

// PFOfVF returns the PF NIC of a VF address.
func (d *Devices) PFOfVF(id string) (int, bool) { return byBus(d.vfPF, id) }

func byBus(m map[string]int, id string) (int, bool) {
	bus, err := topology.NormalizeBusID(id)
	if err != nil {
		return 0, false
	}
	i, ok := m[bus]
	return i, ok
}

// Build makes the NodeResourceTopology of one node. It never fails: what does
// not fit (unknown device IDs, missing GPUs, NICs down) is published as such
// and reported in the problems.
func Build(in Input) (*v1alpha2.NodeResourceTopology, []Problem) {
	b := &builder{in: in, t: in.Topology, devs: NewDevices(in.Topology)}
	b.readOffered()
	vfUsed, claimedVF := b.readHeld()
	b.readNICs()
	b.readVFPools(vfUsed, claimedVF)
	obj := b.header()
	nodeZones, nodeProblems := numaZones(b.t, in.Snapshot)
	obj.Zones = append(obj.Zones, nodeZones...)
	b.problems = append(b.problems, nodeProblems...)
	obj.Zones = append(obj.Zones, b.switchZones()...)
	obj.Zones = append(obj.Zones, b.gpuZones()...)
	obj.Zones = append(obj.Zones, b.nicZones()...)
	return obj, b.problems
}

// builder is one Build: the node's devices as the kubelet reports them,
// read once, and the problems found on the way.
type builder struct {
	in       Input
	t        *topology.Topology
	devs     *Devices
	problems []Problem
	// gpuHealthy: offered by the device plugin; gpuUsed: held by a pod or
	// a DRA claim; nicUp: a port is ACTIVE. By position in the topology.
	gpuHealthy, gpuUsed, nicUp []bool
	// pfPools are the VF pools per PF position and resource.
	pfPools map[int]map[string]*vfPool
}

type vfPool struct{ capacity, available int64 }

// readOffered reads what the device plugin offers: which GPUs are healthy.
// A GPU it does not offer (and no DRA driver publishes) is a problem.
func (b *builder) readOffered() {
	t, in := b.t, b.in
	allocatable := map[string]map[string]bool{} // resource -> device ID -> offered
	for _, d := range in.Snapshot.Allocatable {
		if allocatable[d.Resource] == nil {
			allocatable[d.Resource] = map[string]bool{}
		}
		allocatable[d.Resource][d.ID] = true
	}
	b.gpuHealthy = make([]bool, len(t.GPUs))
	for id := range allocatable[in.Resources.GPU] {
		if i, ok := b.devs.GPU(id); ok {
			b.gpuHealthy[i] = true
		} else {
			b.problems = append(b.problems, Problem{Device: id, Reason: fmt.Sprintf("the device plugin offers %s device %q, which is no GPU of this node", in.Resources.GPU, id)})
		}
	}
	draPublished := map[string]bool{}
	for _, a := range in.DRAPublished {
		if bus, err := topology.NormalizeBusID(a); err == nil {
			draPublished[bus] = true
		}
	}
	for i, g := range t.GPUs {
		if !b.gpuHealthy[i] && !draPublished[g.PCI.Address] {
			b.problems = append(b.problems, Problem{Device: fmt.Sprintf("GPU %d (%s)", g.Index, g.PCI.Address), Reason: "the device plugin does not offer it (fallen off the bus, Xid or unhealthy): published with allocatable 0"})
		}
	}

}

// readHeld reads what pods and DRA claims hold: GPUs in use, and the VFs
// taken (by resource/ID) and claimed (by bus ID).
func (b *builder) readHeld() (vfUsed, claimedVF map[string]bool) {
	t, in := b.t, b.in
	b.gpuUsed = make([]bool, len(t.GPUs))
	vfUsed = map[string]bool{}
	for _, p := range in.Snapshot.Pods {
		for _, d := range p.Devices {
			switch {
			case d.Resource == in.Resources.GPU:
				if i, ok := b.devs.GPU(d.ID); ok {
					b.gpuUsed[i] = true
				} else {
					b.problems = append(b.problems, Problem{Device: d.ID, Reason: fmt.Sprintf("pod %s/%s holds %s device %q, which is no GPU of this node", p.Namespace, p.Name, d.Resource, d.ID)})
				}
			case in.Resources.IsSRIOV(d.Resource):
				vfUsed[d.Resource+"/"+d.ID] = true
			}
		}
	}

	claimedVF = map[string]bool{}
	for _, a := range in.Claimed {
		if i, ok := b.devs.GPU(a); ok {
			b.gpuUsed[i] = true
		} else if _, ok := b.devs.PFOfVF(a); ok {
			claimedVF[a] = true
		}
	}

	return vfUsed, claimedVF
}

// readNICs marks the NICs with an ACTIVE port; a PF without one is a problem.
func (b *builder) readNICs() {
	t := b.t
	b.nicUp = make([]bool, len(t.NICs))
	for i, n := range t.NICs {
		b.nicUp[i] = n.Up()
		if !b.nicUp[i] && n.PhysFn == "" {
			b.problems = append(b.problems, Problem{Device: "RDMA device " + n.Name, Reason: "no port is ACTIVE: published with state " + nicState(n) + " and not offered"})
		}
	}

}

// readVFPools counts each PF's VFs per SR-IOV resource: capacity where the
// PF is up, available where no pod holds and no claim takes the VF.
func (b *builder) readVFPools(vfUsed, claimedVF map[string]bool) {
	in := b.in
	b.pfPools = map[int]map[string]*vfPool{}
	for _, d := range in.Snapshot.Allocatable {
		if !in.Resources.IsSRIOV(d.Resource) {
			continue
		}
		pf, ok := b.devs.PFOfVF(d.ID)
		if !ok {
			b.problems = append(b.problems, Problem{Device: d.ID, Reason: fmt.Sprintf("%s device %q is not a VF of any RDMA device of this node", d.Resource, d.ID)})
			continue
		}
		if b.pfPools[pf] == nil {
			b.pfPools[pf] = map[string]*vfPool{}
		}
		p := b.pfPools[pf][d.Resource]
		if p == nil {
			p = &vfPool{}
			b.pfPools[pf][d.Resource] = p
		}
		if b.nicUp[pf] {
			p.capacity++
			if !vfUsed[d.Resource+"/"+d.ID] && !claimedVF[normalizedBus(d.ID)] {
				p.available++
			}
		}
	}

}

// header is the object without zones: its name and top-level attributes,
// the host's GPUDirect facts among them.
func (b *builder) header() *v1alpha2.NodeResourceTopology {
	t, in := b.t, b.in
	obj := &v1alpha2.NodeResourceTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: "NodeResourceTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: in.Node},
	}
	obj.Attributes = v1alpha2.AttributeList{
		{Name: AttrTopologyManagerPolicy, Value: orDefault(in.TopologyManagerPolicy, "none")},
		{Name: AttrTopologyManagerScope, Value: orDefault(in.TopologyManagerScope, "container")},
		{Name: podfingerprint.Attribute, Value: Fingerprint(counted(in.Snapshot.Pods, in.Admitting))},
		{Name: podfingerprint.AttributeMethod, Value: podfingerprint.MethodAll},
		{Name: AttrSchema, Value: SchemaVersion},
	}
	if g := t.GPUDirect; g != nil {
		dmaBuf, _ := g.DMABuf()
		for _, a := range []v1alpha2.AttributeInfo{{Name: AttrPeerMem, Value: g.PeerMem}, {Name: AttrDMABuf, Value: dmaBuf}, {Name: AttrIOMMU, Value: g.IOMMU}} {
			if a.Value != topology.Unknown {
				obj.Attributes = append(obj.Attributes, a)
			}
		}
		if why := g.HostBlock(); why != "" {
			b.problems = append(b.problems, Problem{Device: "node", Reason: "GPUDirect RDMA cannot run: " + why + " (nicaffinity doctor node says how to fix it)"})
		}
	}
	return obj
}

// switchZones are the PCIeSwitch zones of every switch that holds a GPU or
// an RDMA PF, by name.
func (b *builder) switchZones() []v1alpha2.Zone {
	t := b.t
	switches := map[string]v1alpha2.Zone{}
	addSwitch := func(f topology.PCIFunction) {
		name := b.switchOf(f)
		if _, ok := switches[name]; ok {
			return
		}
		switches[name] = v1alpha2.Zone{
			Name: name, Type: ZonePCIeSwitch, Parent: PrefixNode + strconv.Itoa(topology.NUMAOf(f)),
			Attributes: v1alpha2.AttributeList{{Name: AttrPCIeRoot, Value: f.RootComplex}},
		}
	}
	for _, g := range t.GPUs {
		addSwitch(g.PCI)
	}
	for _, n := range t.NICs {
		if n.PhysFn == "" {
			addSwitch(n.PCI)
		}
	}
	var out []v1alpha2.Zone
	for _, name := range slices.Sorted(maps.Keys(switches)) {
		out = append(out, switches[name])
	}
	return out

}

// ncclPathValue is GPU i's AttrNCCLPath: NCCL's path to every offered NIC.
// Should that exceed an attribute value's cap, it keeps the entries the
// plugin reads beyond the costs (P2C, and PIX or PXB to a NIC with a Data
// Direct function), and says so.
func (b *builder) ncclPathValue(i int, paths []topology.NCCLPath) string {
	var all, close []string
	for j, n := range b.t.NICs {
		if n.PhysFn != "" || !b.nicUp[j] {
			continue
		}
		e := n.Name + "=" + paths[j].String()
		all = append(all, e)
		if paths[j] == topology.PathP2C || n.DataDirect != nil && (paths[j] == topology.PathPIX || paths[j] == topology.PathPXB) {
			close = append(close, e)
		}
	}
	if v := strings.Join(all, ","); len(v) <= MaxValueLen {
		return v
	}
	g := b.t.GPUs[i]
	b.problems = append(b.problems, Problem{Device: fmt.Sprintf("GPU %d (%s)", g.Index, g.PCI.Address),
		Reason: fmt.Sprintf("NCCL paths to %d NICs exceed an attribute's %d bytes: only the P2C ones and the Data Direct NICs' PIX and PXB ones are published", len(all), MaxValueLen)})
	return strings.Join(close, ",")
}

// switchOf is the switch zone of a PCI function.
func (b *builder) switchOf(f topology.PCIFunction) string { return PrefixSwitch + b.t.SwitchOf(f) }

// gpuZones are the GPU zones with their costs to every offered NIC and
// every other GPU, their health and ACS redirects on close paths.
func (b *builder) gpuZones() []v1alpha2.Zone {
	t, in := b.t, b.in
	var out []v1alpha2.Zone
	// GPU zones with their costs to every offered NIC and every other GPU.
	m := t.Matrix()
	paths := t.NCCLPaths()
	nicRow := len(t.GPUs)
	for i, g := range t.GPUs {
		z := v1alpha2.Zone{
			Name: GPUZoneName(g.Index), Type: ZoneGPU, Parent: b.switchOf(g.PCI),
			Attributes: v1alpha2.AttributeList{{Name: AttrPCIBusID, Value: g.PCI.Address}},
		}
		if g.UUID != "" {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrUUID, Value: g.UUID})
		}
		health, alloc, free := HealthOK, int64(1), int64(1)
		if !b.gpuHealthy[i] {
			health, alloc, free = HealthMissing, 0, 0
		} else if b.gpuUsed[i] {
			free = 0
		}
		z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrHealth, Value: health})
		z.Resources = v1alpha2.ResourceInfoList{resourceInfo(in.Resources.GPU, 1, alloc, free)}
		for j, n := range t.NICs {
			if n.PhysFn != "" || !b.nicUp[j] {
				continue
			}
			z.Costs = append(z.Costs, v1alpha2.CostInfo{Name: NICZoneName(n.Name), Value: CostOf(m.Cells[i][nicRow+j].Level)})
		}
		if g.NVLinkDomain != "" {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrNVLinkDomain, Value: g.NVLinkDomain})
		}
		if v := b.ncclPathValue(i, paths[i]); v != "" {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrNCCLPath, Value: v})
		}
		var acs []string
		for j, n := range t.NICs {
			if n.PhysFn != "" || !b.nicUp[j] || m.Cells[i][nicRow+j].Level > topology.LevelPXB {
				continue
			}
			if redirect, _ := t.ACSOnPath(g.PCI, n.PCI); len(redirect) > 0 {
				acs = append(acs, n.Name+"="+redirect[0])
			}
		}
		if len(acs) > 0 {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrACSRedirect, Value: strings.Join(acs, ",")})
			b.problems = append(b.problems, Problem{Device: fmt.Sprintf("GPU %d (%s)", g.Index, g.PCI.Address), Reason: "ACS redirects peer-to-peer traffic to its NICs: " + strings.Join(acs, ", ")})
		}
		for j, peer := range t.GPUs {
			if j != i {
				z.Costs = append(z.Costs, v1alpha2.CostInfo{Name: GPUZoneName(peer.Index), Value: CostOf(m.Cells[i][j].Level)})
			}
		}
		out = append(out, z)
	}

	return out
}

// nicZones are the NIC zones of RDMA PFs (a VF's RDMA device is one of its
// PF's VFs), with their ports and VF pools.
func (b *builder) nicZones() []v1alpha2.Zone {
	t := b.t
	var out []v1alpha2.Zone
	rails := assignRails(t, b.in.Rails)
	// NIC zones for RDMA PFs (a VF's RDMA device is one of its PF's VFs).
	for j, n := range t.NICs {
		if n.PhysFn != "" {
			continue
		}
		z := v1alpha2.Zone{
			Name: NICZoneName(n.Name), Type: ZoneNIC, Parent: b.switchOf(n.PCI),
			Attributes: v1alpha2.AttributeList{{Name: AttrPCIBusID, Value: n.PCI.Address}, {Name: AttrState, Value: nicState(n)}},
		}
		if len(n.Netdevs) > 0 {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrNetdev, Value: strings.Join(n.Netdevs, ",")})
		}
		if len(n.Ports) > 0 {
			p := n.Ports[0]
			z.Attributes = append(z.Attributes,
				v1alpha2.AttributeInfo{Name: AttrPort, Value: strconv.Itoa(p.Number)},
				v1alpha2.AttributeInfo{Name: AttrLinkLayer, Value: p.LinkLayer},
				v1alpha2.AttributeInfo{Name: AttrRate, Value: p.Rate})
			if p.PhysState != "" {
				z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrPhysState, Value: p.PhysState})
			}
			if p.MTU > 0 {
				z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrMTU, Value: strconv.Itoa(p.MTU)})
			}
			if p.RoCEv2 != topology.Unknown {
				z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrRoCEv2, Value: p.RoCEv2})
			}
			if why := topology.PortBlock(n.Name, p); why != "" && b.nicUp[j] {
				b.problems = append(b.problems, Problem{Device: "RDMA device " + n.Name, Reason: "GPUDirect RDMA cannot use it: " + why})
			}
		}
		if r, ok := rails[j]; ok {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrRail, Value: r.rail}, v1alpha2.AttributeInfo{Name: AttrRailSource, Value: r.source})
		}
		if n.DataDirect != nil {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrDataDirect, Value: n.DataDirect.Address})
		}
		for _, res := range slices.Sorted(maps.Keys(b.pfPools[j])) {
			p := b.pfPools[j][res]
			z.Resources = append(z.Resources, resourceInfo(res, p.capacity, p.capacity, p.available))
		}
		out = append(out, z)
	}
	return out
}

// GPUZoneName is the zone of GPU index i.
func GPUZoneName(i int) string { return PrefixGPU + strconv.Itoa(i) }

// NICZoneName is the zone of an RDMA device.
func NICZoneName(name string) string { return PrefixNIC + name }

func nicState(n topology.NIC) string {
	if n.Up() {
		return "ACTIVE"
	}
	for _, p := range n.Ports {
		if p.State != "" {
			return p.State
		}
	}
	return "UNKNOWN"
}

// counted is pods less the admitting ones.
func counted(pods []devices.Pod, admitting map[string]bool) []devices.Pod {
	if len(admitting) == 0 {
		return pods
	}
	out := make([]devices.Pod, 0, len(pods))
	for _, p := range pods {
		if !admitting[p.Namespace+"/"+p.Name] {
			out = append(out, p)
		}
	}
	return out
}

// Fingerprint is the pod-set fingerprint (podfingerprint, method "all") of
// the pods the kubelet reports.
func Fingerprint(pods []devices.Pod) string {
	fp := podfingerprint.NewFingerprint(len(pods))
	for _, p := range pods {
		_ = fp.Add(p.Namespace, p.Name)
	}
	return fp.Sign()
}

func resourceInfo(name string, capacity, allocatable, available int64) v1alpha2.ResourceInfo {
	return v1alpha2.ResourceInfo{
		Name:        name,
		Capacity:    *resource.NewQuantity(capacity, resource.DecimalSI),
		Allocatable: *resource.NewQuantity(allocatable, resource.DecimalSI),
		Available:   *resource.NewQuantity(available, resource.DecimalSI),
	}
}

// numaZones builds the Node zones as the Resource Topology Exporter does,
// so that NodeResourceTopologyMatch reads the same numbers from either:
//   - allocatable per NUMA node is what the kubelet reports it may hand out
//     (podresources GetAllocatableResources: devices by the NUMA nodes their
//     device plugin gives, exclusive CPUs by the NUMA node holding them,
//     memory blocks of the memory manager);
//   - available is allocatable less what pods hold (List), never below 0;
//   - capacity is the machine's (CPUs in the node's cpulist, MemTotal,
//     huge pages); for devices, and where the machine's figure is unknown
//     or smaller, it is the allocatable;
//   - a zone lists the resources that have an allocatable on it; a NUMA
//     node with none lists cpu 0.
//
// A device the kubelet reports on no NUMA node is in no zone: the plugin
// then treats it as a node-level resource, as it does with the Resource
// Topology Exporter's object.
func numaZones(t *topology.Topology, snap devices.Snapshot) ([]v1alpha2.Zone, []Problem) {
	nc := numaCapacities(t)
	problems := nc.problems
	allocatable, used := numaCounts{}, numaCounts{}
	allocatable.count(nc.numaOfCPU, snap.Allocatable, snap.AllocatableCPUs, snap.AllocatableMemory)
	for _, p := range snap.Pods {
		used.count(nc.numaOfCPU, p.Devices, p.CPUs, p.Memory)
	}
	for _, c := range snap.AllocatableCPUs {
		if _, ok := nc.numaOfCPU[c]; !ok {
			problems = append(problems, Problem{Device: fmt.Sprintf("CPU %d", c), Reason: "the kubelet offers it but no NUMA node lists it: left out of the Node zones"})
		}
	}
	for numa := range allocatable {
		nc.numas[numa] = true
	}
	var zones []v1alpha2.Zone
	for _, numa := range slices.Sorted(maps.Keys(nc.numas)) {
		zones = append(zones, numaZone(t, numa, nc.capacity[numa], allocatable[numa], used[numa]))
	}
	return zones, problems
}

// numaCounts are amounts per NUMA node and resource.
type numaCounts map[int]map[string]int64

func (m numaCounts) add(numa int, res string, v int64) {
	if m[numa] == nil {
		m[numa] = map[string]int64{}
	}
	m[numa][res] += v
}

// count adds devices, CPUs and memory blocks to their NUMA nodes.
func (m numaCounts) count(numaOfCPU map[int]int, devs []devices.Device, cpus []int, mem []devices.Memory) {
	for _, d := range devs {
		for _, numa := range d.NUMANodes {
			m.add(numa, d.Resource, 1)
		}
	}
	for _, c := range cpus {
		if numa, ok := numaOfCPU[c]; ok {
			m.add(numa, string(corev1.ResourceCPU), 1)
		}
	}
	for _, b := range mem {
		for _, numa := range b.NUMANodes {
			m.add(numa, b.Type, b.Bytes)
		}
	}
}

// numaCapacity is what the host has per NUMA node: its CPUs, memory and
// huge pages, which NUMA node each CPU is on, and every NUMA node a CPU, a
// GPU or a NIC is on.
type numaCapacity struct {
	numaOfCPU map[int]int
	capacity  numaCounts
	numas     map[int]bool
	problems  []Problem
}

func numaCapacities(t *topology.Topology) numaCapacity {
	nc := numaCapacity{numaOfCPU: map[int]int{}, capacity: numaCounts{}, numas: map[int]bool{}}
	for _, n := range t.NUMANodes {
		nc.numas[n.ID] = true
		cpus, err := topology.ParseCPUList(n.CPUs)
		if err != nil {
			nc.problems = append(nc.problems, Problem{Device: fmt.Sprintf("NUMA node %d", n.ID), Reason: err.Error() + ": its CPUs are left out"})
		}
		for _, c := range cpus {
			nc.numaOfCPU[c] = n.ID
		}
		nc.capacity.add(n.ID, string(corev1.ResourceCPU), int64(len(cpus)))
		if n.MemoryBytes > 0 {
			nc.capacity.add(n.ID, string(corev1.ResourceMemory), n.MemoryBytes)
		}
		for _, hp := range n.HugePages {
			nc.capacity.add(n.ID, hugePagesResource(hp.PageBytes), hp.PageBytes*hp.Count)
		}
	}
	for _, g := range t.GPUs {
		nc.numas[topology.NUMAOf(g.PCI)] = true
	}
	for _, n := range t.NICs {
		nc.numas[topology.NUMAOf(n.PCI)] = true
	}
	return nc
}

// numaZone is one Node zone: its resources (capacity at least what is
// allocatable; available what pods do not use) and its distances.
func numaZone(t *topology.Topology, numa int, capacity, alloc, used map[string]int64) v1alpha2.Zone {
	z := v1alpha2.Zone{Name: PrefixNode + strconv.Itoa(numa), Type: ZoneNode, Resources: v1alpha2.ResourceInfoList{}}
	if len(alloc) == 0 {
		alloc = map[string]int64{string(corev1.ResourceCPU): 0}
	}
	for _, res := range slices.Sorted(maps.Keys(alloc)) {
		a, c := alloc[res], capacity[res]
		if c == 0 || c < a {
			c = a
		}
		z.Resources = append(z.Resources, resourceInfo(res, c, a, max(a-used[res], 0)))
	}
	for _, n := range t.NUMANodes {
		if n.ID != numa {
			continue
		}
		for j, dist := range n.Distances {
			z.Costs = append(z.Costs, v1alpha2.CostInfo{Name: PrefixNode + strconv.Itoa(j), Value: int64(dist)})
		}
	}
	return z
}

// hugePagesResource names the resource of a page size as the kubelet does
// ("hugepages-2Mi", "hugepages-1Gi").
func hugePagesResource(pageBytes int64) string {
	return corev1.ResourceHugePagesPrefix + resource.NewQuantity(pageBytes, resource.BinarySI).String()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// normalizedBus is id as a normalized PCI address, or id as it is.
func normalizedBus(id string) string {
	if bus, err := topology.NormalizeBusID(id); err == nil {
		return bus
	}
	return id
}
