// Package drasim publishes a machine's GPUs and NICs as DRA drivers do, for
// the simulator and the tests (simulation code: stand-ins of real drivers): the ResourceSlices a stand-in of the NVIDIA GPU DRA driver and of
// dranet would write, and the DeviceClasses that select them.
package drasim

import (
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Drivers' names: the NVIDIA GPU DRA driver's and dranet's (docs/dra.md).
const (
	GPUDriver = "gpu.nvidia.com"
	NICDriver = "dra.net"
)

// Option changes what Slices publishes.
type Option func(*options)

type options struct{ sharedNICs bool }

// WithSharedNICs publishes each NIC with allowMultipleAllocations (DRA's
// consumable capacity, beta and on by default since Kubernetes 1.36), so
// that claims share it as pods share one through the RDMA shared device
// plugin. Without it a NIC is allocated to one claim, as dranet hands out
// a whole interface.
func WithSharedNICs() Option { return func(o *options) { o.sharedNICs = true } }

// Slices returns one ResourceSlice per driver for node, its pool named
// after the node, as the real kubelet plugins publish them: every device
// with the standard resource.kubernetes.io/pciBusID and pcieRoot
// attributes, GPUs named gpu-N (the GPU driver's naming) with their UUID
// and product, NICs (PFs) named after their RDMA device (NICName) with
// dranet's dra.net/rdma and dra.net/rdmaDevice.
func Slices(node string, t *topology.Topology, opts ...Option) []resourcev1.ResourceSlice {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	std := func(pci topology.PCIFunction) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
		return map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			dra.AttrPCIBusID: {StringValue: ptr.To(pci.Address)},
			dra.AttrPCIeRoot: {StringValue: ptr.To(pci.RootComplex)},
		}
	}
	var gpus, nics []resourcev1.Device
	for i, g := range t.GPUs {
		attrs := std(g.PCI)
		attrs["uuid"] = resourcev1.DeviceAttribute{StringValue: ptr.To(g.UUID)}
		attrs["productName"] = resourcev1.DeviceAttribute{StringValue: ptr.To(g.Name)}
		gpus = append(gpus, resourcev1.Device{Name: GPUName(i), Attributes: attrs})
	}
	for _, n := range t.NICs {
		if n.PhysFn != "" {
			continue
		}
		attrs := std(n.PCI)
		attrs[NICDriver+"/rdma"] = resourcev1.DeviceAttribute{BoolValue: ptr.To(true)}
		attrs[NICDriver+"/rdmaDevice"] = resourcev1.DeviceAttribute{StringValue: ptr.To(n.Name)}
		d := resourcev1.Device{Name: NICName(n.Name), Attributes: attrs}
		if o.sharedNICs {
			d.AllowMultipleAllocations = ptr.To(true)
		}
		nics = append(nics, d)
	}
	slice := func(driver string, devices []resourcev1.Device) resourcev1.ResourceSlice {
		return resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + strings.ReplaceAll(driver, ".", "-")},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   driver,
				NodeName: ptr.To(node),
				Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
				Devices:  devices,
			},
		}
	}
	return []resourcev1.ResourceSlice{slice(GPUDriver, gpus), slice(NICDriver, nics)}
}

// GPUName is the device name of GPU position i.
func GPUName(i int) string { return fmt.Sprintf("gpu-%d", i) }

// NICName is the device name of an RDMA device: a DNS label, as device
// names must be.
func NICName(rdma string) string { return strings.ReplaceAll(rdma, "_", "-") }

// DeviceClasses select each driver's devices, as the drivers' Helm charts
// install them: gpu.nvidia.com and dranet.net (dra.GPUClass, dra.NICClass).
func DeviceClasses() []resourcev1.DeviceClass {
	class := func(name, driver string) resourcev1.DeviceClass {
		return resourcev1.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
				CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
			}}},
		}
	}
	return []resourcev1.DeviceClass{class(dra.GPUClass, GPUDriver), class(dra.NICClass, NICDriver)}
}
