// Package nrttest builds NodeResourceTopology objects for tests: from the
// fixture machines through the real exporter schema, or by hand.
package nrttest

import (
	"fmt"
	"strings"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// FromTopology is nrt.ObjectFor: the object the exporter would publish for
// topo, the GPUs at positions used held by another pod.
func FromTopology(node string, topo *topology.Topology, extra []devices.Device, used ...int) (*v1alpha2.NodeResourceTopology, []nrt.Problem) {
	return nrt.ObjectFor(node, topo, extra, used...)
}

// Builder builds an object by hand.
type Builder struct {
	obj *v1alpha2.NodeResourceTopology
}

// MakeNRT starts an object for node with the schema attribute set.
func MakeNRT(node string) *Builder {
	return &Builder{obj: &v1alpha2.NodeResourceTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: "NodeResourceTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Attributes: v1alpha2.AttributeList{{Name: nrt.AttrSchema, Value: nrt.SchemaVersion}},
	}}
}

// Attr sets a top-level attribute.
func (b *Builder) Attr(name, value string) *Builder {
	for i := range b.obj.Attributes {
		if b.obj.Attributes[i].Name == name {
			b.obj.Attributes[i].Value = value
			return b
		}
	}
	b.obj.Attributes = append(b.obj.Attributes, v1alpha2.AttributeInfo{Name: name, Value: value})
	return b
}

// Zone appends a zone.
func (b *Builder) Zone(z v1alpha2.Zone) *Builder {
	b.obj.Zones = append(b.obj.Zones, z)
	return b
}

// Obj returns the object.
func (b *Builder) Obj() *v1alpha2.NodeResourceTopology { return b.obj }

// Res is a resource with capacity = allocatable and the given available.
func Res(name string, capacity, available int64) v1alpha2.ResourceInfo {
	return v1alpha2.ResourceInfo{Name: name, Capacity: *resource.NewQuantity(capacity, resource.DecimalSI),
		Allocatable: *resource.NewQuantity(capacity, resource.DecimalSI), Available: *resource.NewQuantity(available, resource.DecimalSI)}
}

// Switch is a PCIeSwitch zone under node-0.
func Switch(name string) v1alpha2.Zone {
	return v1alpha2.Zone{Name: name, Type: nrt.ZonePCIeSwitch, Parent: "node-0", Attributes: v1alpha2.AttributeList{{Name: nrt.AttrPCIeRoot, Value: "pci0000:00"}}}
}

// GPU is a GPU zone with its free flag and NIC costs (zone name -> cost).
func GPU(index int, sw string, free bool, costs map[string]int64) v1alpha2.Zone {
	avail := int64(0)
	if free {
		avail = 1
	}
	z := v1alpha2.Zone{Name: nrt.GPUZoneName(index), Type: nrt.ZoneGPU, Parent: sw,
		Resources: v1alpha2.ResourceInfoList{Res("nvidia.com/gpu", 1, avail)}}
	for name, c := range costs {
		z.Costs = append(z.Costs, v1alpha2.CostInfo{Name: name, Value: c})
	}
	return z
}

// NIC is an ACTIVE NIC zone, with VF pools (resource -> capacity, available).
func NIC(name, sw string, vfs ...v1alpha2.ResourceInfo) v1alpha2.Zone {
	return v1alpha2.Zone{Name: nrt.NICZoneName(name), Type: nrt.ZoneNIC, Parent: sw,
		Attributes: v1alpha2.AttributeList{{Name: nrt.AttrState, Value: "ACTIVE"}}, Resources: vfs}
}

// HalfNICs is an 8-GPU node with four PCIe switches of two GPUs each; only
// switches 0 and 1 hold a NIC (mlx5_0, mlx5_1: PIX to their two GPUs, NODE to
// the rest). free lists the GPUs that are available. GPU g has bus ID
// 0000:<16*(g+1)>:00.0.
func HalfNICs(node string, free ...int) *v1alpha2.NodeResourceTopology {
	b := MakeNRT(node).Zone(v1alpha2.Zone{Name: "node-0", Type: nrt.ZoneNode})
	for s := 0; s < 4; s++ {
		b.Zone(Switch(fmt.Sprintf("pcie-%d", s)))
	}
	isFree := map[int]bool{}
	for _, f := range free {
		isFree[f] = true
	}
	for g := 0; g < 8; g++ {
		costs := map[string]int64{"nic-mlx5_0": 40, "nic-mlx5_1": 40}
		if g/2 < 2 {
			costs[fmt.Sprintf("nic-mlx5_%d", g/2)] = 10
		}
		z := GPU(g, fmt.Sprintf("pcie-%d", g/2), isFree[g], costs)
		z.Attributes = v1alpha2.AttributeList{{Name: nrt.AttrPCIBusID, Value: fmt.Sprintf("0000:%02x:00.0", 0x10*(g+1))}}
		b.Zone(z)
	}
	b.Zone(NIC("mlx5_0", "pcie-0")).Zone(NIC("mlx5_1", "pcie-1"))
	return b.Obj()
}

// Largest is the largest object the caps admit (nrt.MaxZones zones,
// nrt.MaxCosts costs, nrt.MaxAttributes attributes, nrt.MaxResources
// resources, every name and value at its longest where the object's size
// allows) that still compiles: nrt.MaxGPUs GPU zones with a cost to every
// NIC and GPU, nrt.MaxNICs NIC zones with VFs, and filler Node zones. It is
// what a hostile writer can make the scheduler decode and compile.
func Largest(node string) *v1alpha2.NodeResourceTopology {
	b := MakeNRT(node).Zone(v1alpha2.Zone{Name: "node-0", Type: nrt.ZoneNode}).Zone(Switch("pcie-0"))
	long := func(prefix string, i int) string {
		return fmt.Sprintf("%s%d-%s", prefix, i, strings.Repeat("x", 40))
	}
	attrs := len(b.obj.Attributes) + 1 // the switch's
	for g := 0; g < nrt.MaxGPUs; g++ {
		costs := map[string]int64{}
		for n := 0; n < nrt.MaxNICs; n++ {
			costs[nrt.NICZoneName(fmt.Sprintf("mlx5_%d", n))] = int64(10 + 10*((g+n)%5))
		}
		for o := 0; o < nrt.MaxGPUs && len(costs) < nrt.MaxCostsPerZone; o++ {
			if o != g {
				costs[nrt.GPUZoneName(o)] = 5
			}
		}
		costs["node-0"] = 10 // the 128th
		z := GPU(g, "pcie-0", true, costs)
		z.Attributes = v1alpha2.AttributeList{{Name: nrt.AttrPCIBusID, Value: fmt.Sprintf("0000:%02x:00.0", g+1)}}
		for len(z.Attributes) < nrt.MaxAttributesPerZone/2 {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: long("example.com/a", len(z.Attributes)), Value: strings.Repeat("v", 64)})
		}
		attrs += len(z.Attributes)
		b.Zone(z)
	}
	resources := nrt.MaxGPUs
	for n := 0; n < nrt.MaxNICs; n++ {
		z := NIC(fmt.Sprintf("mlx5_%d", n), "pcie-0")
		for v := 0; v < 4; v++ {
			z.Resources = append(z.Resources, Res(long("example.com/vf", v), 8, 8))
		}
		resources += len(z.Resources)
		for len(z.Attributes) < nrt.MaxAttributesPerZone/2-1 {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: long("example.com/a", len(z.Attributes)), Value: strings.Repeat("v", 64)})
		}
		attrs += len(z.Attributes)
		b.Zone(z)
	}
	for i := 1; len(b.obj.Zones) < nrt.MaxZones; i++ {
		z := v1alpha2.Zone{Name: fmt.Sprintf("node-%d", i), Type: nrt.ZoneNode}
		for resources < nrt.MaxResources && len(z.Resources) < 8 {
			z.Resources = append(z.Resources, Res(long("example.com/r", len(z.Resources)), 1<<30, 1<<29))
			resources++
		}
		for attrs < nrt.MaxAttributes && len(z.Attributes) < 4 {
			z.Attributes = append(z.Attributes, v1alpha2.AttributeInfo{Name: long("example.com/a", len(z.Attributes)), Value: strings.Repeat("v", 64)})
			attrs++
		}
		b.Zone(z)
	}
	return b.Obj()
}
