package nrt

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Input is everything one NRT object is built from.
type Input struct {
	Node      string
	Topology  *topology.Topology
	Snapshot  podresources.Snapshot
	Resources Resources
	// TopologyManagerPolicy and Scope as the kubelet is configured ("none", "container" when unknown).
	TopologyManagerPolicy string
	TopologyManagerScope  string
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
	vfPF map[string]int // VF address -> position in topo.NICs of its PF
}

// NewDevices indexes a topology by the IDs device plugins use.
func NewDevices(t *topology.Topology) *Devices {
	d := &Devices{topo: t, gpu: map[string]int{}, vfPF: map[string]int{}}
	for i, g := range t.GPUs {
		d.gpu[g.PCI.Address] = i
		if g.UUID != "" {
			d.gpu[g.UUID] = i
		}
	}
	for i, n := range t.NICs {
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

// PFOfVF returns the PF NIC of a VF address.
func (d *Devices) PFOfVF(id string) (int, bool) {
	bus, err := topology.NormalizeBusID(id)
	if err != nil {
		return 0, false
	}
	i, ok := d.vfPF[bus]
	return i, ok
}

// Build makes the NodeResourceTopology of one node. It never fails: what does
// not fit (unknown device IDs, missing GPUs, NICs down) is published as such
// and reported in the problems.
func Build(in Input) (*v1alpha2.NodeResourceTopology, []Problem) {
	t := in.Topology
	devs := NewDevices(t)
	var problems []Problem

	allocatable := map[string]map[string]bool{} // resource -> device ID -> offered
	for _, d := range in.Snapshot.Allocatable {
		if allocatable[d.Resource] == nil {
			allocatable[d.Resource] = map[string]bool{}
		}
		allocatable[d.Resource][d.ID] = true
	}
	gpuHealthy := make([]bool, len(t.GPUs))
	for id := range allocatable[in.Resources.GPU] {
		if i, ok := devs.GPU(id); ok {
			gpuHealthy[i] = true
		} else {
			problems = append(problems, Problem{Device: id, Reason: fmt.Sprintf("the device plugin offers %s device %q, which is no GPU of this node", in.Resources.GPU, id)})
		}
	}
	for i, g := range t.GPUs {
		if !gpuHealthy[i] {
			problems = append(problems, Problem{Device: fmt.Sprintf("GPU %d (%s)", g.Index, g.PCI.Address), Reason: "the device plugin does not offer it (fallen off the bus, Xid or unhealthy): published with allocatable 0"})
		}
	}

	gpuUsed := make([]bool, len(t.GPUs))
	vfUsed := map[string]bool{}
	otherUsed := map[string]map[string]bool{}
	for _, p := range in.Snapshot.Pods {
		for _, d := range p.Devices {
			switch {
			case d.Resource == in.Resources.GPU:
				if i, ok := devs.GPU(d.ID); ok {
					gpuUsed[i] = true
				} else {
					problems = append(problems, Problem{Device: d.ID, Reason: fmt.Sprintf("pod %s/%s holds %s device %q, which is no GPU of this node", p.Namespace, p.Name, d.Resource, d.ID)})
				}
			case in.Resources.IsSRIOV(d.Resource):
				vfUsed[d.Resource+"/"+d.ID] = true
			default:
				if otherUsed[d.Resource] == nil {
					otherUsed[d.Resource] = map[string]bool{}
				}
				otherUsed[d.Resource][d.ID] = true
			}
		}
	}

	nicUp := make([]bool, len(t.NICs))
	for i, n := range t.NICs {
		nicUp[i] = n.Up()
		if !nicUp[i] && n.PhysFn == "" {
			problems = append(problems, Problem{Device: "RDMA device " + n.Name, Reason: "no port is ACTIVE: published with state " + nicState(n) + " and not offered"})
		}
	}

	// Per-PF VF pools and per-NUMA totals.
	type pool struct{ capacity, available int64 }
	pfPools := map[int]map[string]*pool{}
	numaRes := map[int]map[string]*pool{}
	add := func(m map[int]map[string]*pool, k int, res string, capacity, available int64) {
		if m[k] == nil {
			m[k] = map[string]*pool{}
		}
		if m[k][res] == nil {
			m[k][res] = &pool{}
		}
		m[k][res].capacity += capacity
		m[k][res].available += available
	}
	for _, d := range in.Snapshot.Allocatable {
		switch {
		case d.Resource == in.Resources.GPU:
		case in.Resources.IsSRIOV(d.Resource):
			pf, ok := devs.PFOfVF(d.ID)
			if !ok {
				problems = append(problems, Problem{Device: d.ID, Reason: fmt.Sprintf("%s device %q is not a VF of any RDMA device of this node", d.Resource, d.ID)})
				continue
			}
			free := int64(1)
			if vfUsed[d.Resource+"/"+d.ID] || !nicUp[pf] {
				free = 0
			}
			offered := int64(1)
			if !nicUp[pf] {
				offered = 0
			}
			add(pfPools, pf, d.Resource, offered, free)
			add(numaRes, topology.NUMAOf(t.NICs[pf].PCI), d.Resource, offered, free)
		default:
			numa := 0
			if len(d.NUMANodes) > 0 {
				numa = d.NUMANodes[0]
			}
			free := int64(1)
			if otherUsed[d.Resource][d.ID] {
				free = 0
			}
			add(numaRes, numa, d.Resource, 1, free)
		}
	}

	obj := &v1alpha2.NodeResourceTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: "NodeResourceTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: in.Node},
	}
	obj.Attributes = v1alpha2.AttributeList{
		{Name: AttrTopologyManagerPolicy, Value: orDefault(in.TopologyManagerPolicy, "none")},
		{Name: AttrTopologyManagerScope, Value: orDefault(in.TopologyManagerScope, "container")},
		{Name: podfingerprint.Attribute, Value: Fingerprint(in.Snapshot.Pods)},
		{Name: podfingerprint.AttributeMethod, Value: podfingerprint.MethodAll},
		{Name: AttrSchema, Value: SchemaVersion},
	}

	// Node zones, one per NUMA node that exists or holds a device.
	numas := map[int]bool{}
	for _, n := range t.NUMANodes {
		numas[n.ID] = true
	}
	gpuCap, gpuAlloc, gpuFree := map[int]int64{}, map[int]int64{}, map[int]int64{}
	for i, g := range t.GPUs {
		numa := topology.NUMAOf(g.PCI)
		numas[numa] = true
		gpuCap[numa]++
		if gpuHealthy[i] {
			gpuAlloc[numa]++
			if !gpuUsed[i] {
				gpuFree[numa]++
			}
		}
	}
	for _, n := range t.NICs {
		numas[topology.NUMAOf(n.PCI)] = true
	}
	for numa := range numaRes {
		numas[numa] = true
	}
	for _, numa := range slices.Sorted(maps.Keys(numas)) {
		z := v1alpha2.Zone{Name: PrefixNode + strconv.Itoa(numa), Type: ZoneNode}
		if gpuCap[numa] > 0 {
			z.Resources = append(z.Resources, resourceInfo(in.Resources.GPU, gpuCap[numa], gpuAlloc[numa], gpuFree[numa]))
		}
		for _, res := range slices.Sorted(maps.Keys(numaRes[numa])) {
			p := numaRes[numa][res]
			z.Resources = append(z.Resources, resourceInfo(res, p.capacity, p.capacity, p.available))
		}
		for _, n := range t.NUMANodes {
			if n.ID != numa {
				continue
			}
			for j, dist := range n.Distances {
				z.Costs = append(z.Costs, v1alpha2.CostInfo{Name: PrefixNode + strconv.Itoa(j), Value: int64(dist)})
			}
		}
		obj.Zones = append(obj.Zones, z)
	}

	// Switch zones for every switch that holds a GPU or an RDMA PF.
	switchOf := func(f topology.PCIFunction) string { return PrefixSwitch + t.SwitchOf(f) }
	switches := map[string]v1alpha2.Zone{}
	addSwitch := func(f topology.PCIFunction) {
		name := switchOf(f)
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
	for _, name := range slices.Sorted(maps.Keys(switches)) {
		obj.Zones = append(obj.Zones, switches[name])
	}

	// GPU zones with their costs to every offered NIC and every other GPU.
	m := t.Matrix()
	nicRow := len(t.GPUs)
	for i, g := range t.GPUs {
		z := v1alpha2.Zone{
			Name: GPUZoneName(g.Index), Type: ZoneGPU, Parent: switchOf(g.PCI),
			Attributes: v1alpha2.AttributeList{{Name: AttrPCIBusID, Value: g.PCI.Address}},
		}
		if g.UUID != "" {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrUUID, Value: g.UUID})
		}
		health, alloc, free := HealthOK, int64(1), int64(1)
		if !gpuHealthy[i] {
			health, alloc, free = HealthMissing, 0, 0
		} else if gpuUsed[i] {
			free = 0
		}
		z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: AttrHealth, Value: health})
		z.Resources = v1alpha2.ResourceInfoList{resourceInfo(in.Resources.GPU, 1, alloc, free)}
		for j, n := range t.NICs {
			if n.PhysFn != "" || !nicUp[j] {
				continue
			}
			z.Costs = append(z.Costs, v1alpha2.CostInfo{Name: NICZoneName(n.Name), Value: CostOf(m.Cells[i][nicRow+j].Level)})
		}
		for j, peer := range t.GPUs {
			if j != i {
				z.Costs = append(z.Costs, v1alpha2.CostInfo{Name: GPUZoneName(peer.Index), Value: CostOf(m.Cells[i][j].Level)})
			}
		}
		obj.Zones = append(obj.Zones, z)
	}

	// NIC zones for RDMA PFs (a VF's RDMA device is one of its PF's VFs).
	for j, n := range t.NICs {
		if n.PhysFn != "" {
			continue
		}
		z := v1alpha2.Zone{
			Name: NICZoneName(n.Name), Type: ZoneNIC, Parent: switchOf(n.PCI),
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
		}
		for _, res := range slices.Sorted(maps.Keys(pfPools[j])) {
			p := pfPools[j][res]
			z.Resources = append(z.Resources, resourceInfo(res, p.capacity, p.capacity, p.available))
		}
		obj.Zones = append(obj.Zones, z)
	}
	return obj, problems
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

// Fingerprint is the pod-set fingerprint (podfingerprint, method "all") of
// the pods the kubelet reports.
func Fingerprint(pods []podresources.Pod) string {
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

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
