package dra

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Device classes of the drivers the templates default to: the NVIDIA GPU
// DRA driver's and dranet's (RDMA NICs). Others are passed in.
const (
	GPUClass = "gpu.nvidia.com"
	NICClass = "dranet.net"
)

// Methods of alignment.
const (
	MethodPCIeRoot = "pcieRoot"
	MethodDerived  = "derived"
)

// ClaimOptions describe the claim: GPUs GPUs in groups of GPUsPerNIC, each
// group with one NIC it is aligned with.
type ClaimOptions struct {
	Name, Namespace string
	GPUs            int
	GPUsPerNIC      int
	GPUClass        string
	NICClass        string
	MaxLevel        topology.Level
	// Derived allows a derived attribute where pcieRoot is not enough
	// (the DRADerivedAttributes feature gate, alpha in Kubernetes 1.37).
	Derived bool
}

// Claims is a generated template and how it aligns.
type Claims struct {
	Template *resourcev1.ResourceClaimTemplate `json:"template"`
	Method   string                            `json:"method"`
	Notes    []string                          `json:"notes,omitempty"`
}

// unit is a set of GPUs and NICs that are pairwise aligned: one pcieRoot
// where that is enough, else one alignment group (the devices under one
// root port or switch, as levels group them).
type unit struct {
	name       string
	gpus, nics []string // bus IDs
}

// BuildClaims makes the template for t. Errors name what is wrong with the
// request or the machine.
func BuildClaims(machine string, t *topology.Topology, o ClaimOptions) (Claims, error) {
	if o.GPUsPerNIC == 0 {
		o.GPUsPerNIC = 1
	}
	if o.MaxLevel == 0 {
		o.MaxLevel = topology.LevelPXB
	}
	if o.GPUClass == "" {
		o.GPUClass = GPUClass
	}
	if o.NICClass == "" {
		o.NICClass = NICClass
	}
	switch {
	case o.GPUs <= 0:
		return Claims{}, fmt.Errorf("--gpus %d: want at least 1", o.GPUs)
	case o.GPUsPerNIC < 1:
		return Claims{}, fmt.Errorf("--gpus-per-nic %d: want at least 1", o.GPUsPerNIC)
	case o.GPUs%o.GPUsPerNIC != 0:
		return Claims{}, fmt.Errorf("--gpus %d is not a multiple of --gpus-per-nic %d", o.GPUs, o.GPUsPerNIC)
	case o.GPUs > len(t.GPUs):
		return Claims{}, fmt.Errorf("%d GPUs: machine %s has %d", o.GPUs, machine, len(t.GPUs))
	}
	pfs := 0
	for _, n := range t.NICs {
		if n.PhysFn == "" {
			pfs++
		}
	}
	if pfs == 0 {
		return Claims{}, fmt.Errorf("machine %s has no RDMA NIC: nothing to align its GPUs with", machine)
	}
	check := CheckTopology(machine, t, o.MaxLevel)
	if !check.Known {
		return Claims{}, fmt.Errorf("machine %s: %s", machine, check.Why)
	}
	out := Claims{Method: MethodPCIeRoot}
	units := rootUnits(t)
	if !check.Enough {
		if !o.Derived {
			return Claims{}, fmt.Errorf("on %s pcieRoot is not enough (%d of %d same-root GPU-NIC pairs are past %s): allow a derived attribute (--derived, needs the DRADerivedAttributes feature gate) or pick another shape",
				machine, len(check.Unaligned), check.SameRoot, o.MaxLevel)
		}
		var err error
		if units, err = alignedUnits(t, o.MaxLevel); err != nil {
			return Claims{}, fmt.Errorf("machine %s: %w", machine, err)
		}
		out.Method = MethodDerived
		out.Notes = append(out.Notes, fmt.Sprintf("pcieRoot is not enough on %s: %d of %d same-root GPU-NIC pairs are past %s; the template maps each device's %s to its alignment group with a derived attribute (%s), which needs the DRADerivedAttributes feature gate (alpha in Kubernetes 1.37) on the apiserver and the scheduler",
			machine, len(check.Unaligned), check.SameRoot, o.MaxLevel, AttrPCIBusID, SwitchAttr))
	}
	groups := o.GPUs / o.GPUsPerNIC
	capacity, largest := 0, 0
	for _, u := range units {
		if len(u.nics) > 0 {
			largest = max(largest, len(u.gpus))
		}
		capacity += min(len(u.gpus)/o.GPUsPerNIC, len(u.nics))
	}
	if largest < o.GPUsPerNIC {
		return Claims{}, fmt.Errorf("%d GPUs per NIC is larger than any switch of %s: at most %d GPUs share a NIC at %s or closer", o.GPUsPerNIC, machine, largest, o.MaxLevel)
	}
	if capacity < groups {
		return Claims{}, fmt.Errorf("%d groups of %d GPUs, each with its own aligned NIC: %s has room for %d", groups, o.GPUsPerNIC, machine, capacity)
	}

	spec := resourcev1.ResourceClaimSpec{}
	for i := 0; i < groups; i++ {
		g, n := "gpus-"+strconv.Itoa(i), "nic-"+strconv.Itoa(i)
		gpuReq := resourcev1.ExactDeviceRequest{DeviceClassName: o.GPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(o.GPUsPerNIC)}
		nicReq := resourcev1.ExactDeviceRequest{DeviceClassName: o.NICClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
		attr := resourcev1.FullyQualifiedName(AttrPCIeRoot)
		if out.Method == MethodDerived {
			derived := []resourcev1.DeviceDerivedAttribute{{Name: SwitchAttr, Expression: groupExpression(units)}}
			gpuReq.DerivedAttributes, nicReq.DerivedAttributes = derived, derived
			attr = SwitchAttr
		}
		spec.Devices.Requests = append(spec.Devices.Requests,
			resourcev1.DeviceRequest{Name: g, Exactly: &gpuReq},
			resourcev1.DeviceRequest{Name: n, Exactly: &nicReq})
		spec.Devices.Constraints = append(spec.Devices.Constraints, resourcev1.DeviceConstraint{Requests: []string{g, n}, MatchAttribute: &attr})
	}
	out.Template = &resourcev1.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: spec},
	}
	return out, nil
}

// rootUnits groups the machine's GPUs and PF NICs by root complex.
func rootUnits(t *topology.Topology) []unit {
	byRoot := map[string]*unit{}
	var order []string
	get := func(root string) *unit {
		if byRoot[root] == nil {
			byRoot[root] = &unit{name: root}
			order = append(order, root)
		}
		return byRoot[root]
	}
	for _, g := range t.GPUs {
		u := get(g.PCI.RootComplex)
		u.gpus = append(u.gpus, g.PCI.Address)
	}
	for _, n := range t.NICs {
		if n.PhysFn == "" {
			u := get(n.PCI.RootComplex)
			u.nics = append(u.nics, n.PCI.Address)
		}
	}
	sort.Strings(order)
	out := make([]unit, 0, len(order))
	for _, r := range order {
		out = append(out, *byRoot[r])
	}
	return out
}

// alignedUnits groups GPUs and PF NICs into sets whose every GPU-NIC pair
// is at maxLevel or closer: the connected parts of the "aligned" relation,
// checked to be whole (on a PCIe tree at PXB they are the devices below
// one root port).
func alignedUnits(t *topology.Topology, maxLevel topology.Level) ([]unit, error) {
	m := t.Matrix()
	ng := len(t.GPUs)
	parent := make([]int, ng+len(t.NICs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	pf := func(j int) bool { return t.NICs[j].PhysFn == "" }
	for i := range t.GPUs {
		for j := range t.NICs {
			if pf(j) && m.Cells[i][ng+j].Level <= maxLevel {
				parent[find(i)] = find(ng + j)
			}
		}
	}
	groups := map[int]*unit{}
	for i, g := range t.GPUs {
		r := find(i)
		if groups[r] == nil {
			groups[r] = &unit{}
		}
		groups[r].gpus = append(groups[r].gpus, g.PCI.Address)
	}
	for j, n := range t.NICs {
		if !pf(j) {
			continue
		}
		r := find(ng + j)
		if groups[r] == nil {
			groups[r] = &unit{}
		}
		groups[r].nics = append(groups[r].nics, n.PCI.Address)
	}
	for i := range t.GPUs {
		for j := range t.NICs {
			if pf(j) && find(i) == find(ng+j) && m.Cells[i][ng+j].Level > maxLevel {
				return nil, fmt.Errorf("GPU %s and NIC %s are in one alignment group but %s apart: alignment at %s does not group this machine's devices", t.GPUs[i].PCI.Address, t.NICs[j].Name, m.Cells[i][ng+j].Level, maxLevel)
			}
		}
	}
	var out []unit
	for _, u := range groups {
		sort.Strings(u.gpus)
		sort.Strings(u.nics)
		out = append(out, *u)
	}
	sort.Slice(out, func(a, b int) bool { return first(out[a]) < first(out[b]) })
	for i := range out {
		out[i].name = "group-" + strconv.Itoa(i)
	}
	return out, nil
}

func first(u unit) string {
	all := append(append([]string(nil), u.gpus...), u.nics...)
	sort.Strings(all)
	return all[0]
}

// groupExpression is the derived attribute's CEL: a device's
// resource.kubernetes.io/pciBusID looked up in the machine's groups. A
// device without the attribute, or one the map does not know, gets a value
// of its own (its bus ID, or its driver and name), so it matches nothing
// by accident.
func groupExpression(units []unit) string {
	var entries []string
	for _, u := range units {
		if len(u.gpus) == 0 || len(u.nics) == 0 {
			continue // no aligned pair to make there
		}
		for _, a := range append(append([]string(nil), u.gpus...), u.nics...) {
			entries = append(entries, strconv.Quote(a)+": "+strconv.Quote(u.name))
		}
	}
	sort.Strings(entries)
	const bus = `device.attributes["` + Domain + `"].pciBusID`
	return `!has(` + bus + `) ? "unmapped/" + device.driver : ` +
		`(` + bus + ` in {` + strings.Join(entries, ", ") + `} ? {` + strings.Join(entries, ", ") + `}[` + bus + `] : "unmapped/" + ` + bus + `)`
}
