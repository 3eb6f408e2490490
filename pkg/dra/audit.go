package dra

import (
	"fmt"
	"sort"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// What the audit reads is outside data: ResourceSlices are written by
// whichever DRA drivers run on the node, claims by users and the scheduler.
// These bounds keep a hostile or broken one from costing more than a
// node's worth of work; past them the rest is ignored and said so.
const (
	// MaxSlices is the most ResourceSlices of one node the audit reads.
	MaxSlices = 1024
	// MaxDevices is the most devices it indexes across them.
	MaxDevices = 16384
	// MaxClaimResults is the most allocated devices it reads of one claim.
	MaxClaimResults = 256
)

// DeviceRef names an allocated device as DRA does: driver, pool, device.
type DeviceRef struct {
	Driver, Pool, Device string
}

func (r DeviceRef) String() string { return r.Driver + "/" + r.Pool + "/" + r.Device }

// Index maps the devices a node's ResourceSlices publish to their PCI
// addresses, from the standard attribute resource.kubernetes.io/pciBusID
// (AttrPCIBusID), which the NVIDIA GPU driver and dranet publish.
type Index struct {
	pci map[DeviceRef]string
	// known are all devices of the node's newest slices, PCI or not.
	known map[DeviceRef]bool
	// Problems are devices whose pciBusID is no PCI address, and bounds hit.
	Problems []string
}

// PCI returns the PCI address of a device, if its slice gave one.
func (x *Index) PCI(r DeviceRef) (string, bool) {
	a, ok := x.pci[r]
	return a, ok
}

// Addresses are the PCI addresses the slices publish, sorted.
func (x *Index) Addresses() []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range x.pci {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// IndexSlices indexes the slices of node (others are skipped). Of each
// pool, only the slices of its newest generation count, as for the
// scheduler: older ones are being replaced.
func IndexSlices(slices []resourcev1.ResourceSlice, node string) *Index {
	x := &Index{pci: map[DeviceRef]string{}, known: map[DeviceRef]bool{}}
	if len(slices) > MaxSlices {
		x.Problems = append(x.Problems, fmt.Sprintf("%d ResourceSlices on node %s: only the first %d are read", len(slices), node, MaxSlices))
		slices = slices[:MaxSlices]
	}
	type poolKey struct{ driver, pool string }
	newest := map[poolKey]int64{}
	for i := range slices {
		s := &slices[i].Spec
		k := poolKey{s.Driver, s.Pool.Name}
		if g, seen := newest[k]; !seen || s.Pool.Generation > g {
			newest[k] = s.Pool.Generation
		}
	}
	n := 0
	for i := range slices {
		s := &slices[i].Spec
		if s.NodeName == nil || *s.NodeName != node || s.Pool.Generation != newest[poolKey{s.Driver, s.Pool.Name}] {
			continue
		}
		for _, d := range s.Devices {
			if n++; n > MaxDevices {
				x.Problems = append(x.Problems, fmt.Sprintf("more than %d devices in node %s's ResourceSlices: the rest are not read", MaxDevices, node))
				return x
			}
			ref := DeviceRef{Driver: s.Driver, Pool: s.Pool.Name, Device: d.Name}
			x.known[ref] = true
			attr, ok := d.Attributes[AttrPCIBusID]
			if !ok || attr.StringValue == nil {
				continue // not a PCI device, or its driver does not say
			}
			bus, err := topology.NormalizeBusID(*attr.StringValue)
			if err != nil {
				x.Problems = append(x.Problems, fmt.Sprintf("device %s: %s %q is no PCI address", ref, AttrPCIBusID, truncate(*attr.StringValue)))
				continue
			}
			x.pci[ref] = bus
		}
	}
	return x
}

// Allocated lists the devices allocated to a claim on node (the
// allocation's node selector is the scheduler's business; pools are
// matched against the index). Admin-access results are left out: such a
// device is shared for monitoring, not handed to the pod.
func Allocated(claim *resourcev1.ResourceClaim) ([]DeviceRef, []string) {
	if claim.Status.Allocation == nil {
		return nil, nil
	}
	var out []DeviceRef
	var problems []string
	results := claim.Status.Allocation.Devices.Results
	if len(results) > MaxClaimResults {
		problems = append(problems, fmt.Sprintf("ResourceClaim %s/%s has %d allocated devices: only the first %d are read", claim.Namespace, claim.Name, len(results), MaxClaimResults))
		results = results[:MaxClaimResults]
	}
	for _, r := range results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		out = append(out, DeviceRef{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, problems
}

// PodDevices are the PCI addresses of the devices a pod holds through its
// claims, and what could not be mapped.
type PodDevices struct {
	PCI      []string
	Problems []string
}

// MapPod maps the devices of a pod's allocated claims to PCI addresses.
// A device without pciBusID is no problem (it is not a PCI device to
// align: a CPU, a memory region); one that no slice of the node publishes
// is.
func (x *Index) MapPod(claims []*resourcev1.ResourceClaim) PodDevices {
	var out PodDevices
	seen := map[string]bool{}
	for _, c := range claims {
		refs, problems := Allocated(c)
		out.Problems = append(out.Problems, problems...)
		for _, r := range refs {
			bus, ok := x.PCI(r)
			if !ok {
				if !x.known[r] {
					out.Problems = append(out.Problems, fmt.Sprintf("ResourceClaim %s/%s holds %s, which no ResourceSlice of this node publishes", c.Namespace, c.Name, r))
				}
				continue
			}
			if !seen[bus] {
				seen[bus] = true
				out.PCI = append(out.PCI, bus)
			}
		}
	}
	sort.Strings(out.PCI)
	return out
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
