package dra

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
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
	// MethodSelector: with shared NICs, the GPUs that have an aligned NIC
	// (a CEL selector on their bus IDs) and every NIC.
	MethodSelector = "selector"
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
	// SharedNICs: the NIC driver publishes its NICs with
	// allowMultipleAllocations (consumable capacity), so claims share them
	// as pods share HCAs through the RDMA shared device plugin. The
	// template then needs no pairs (MethodSelector): GPUs whose bus IDs
	// have an aligned NIC, and every NIC, of which NCCL uses each GPU's
	// nearest. Without it a NIC is one group's.
	SharedNICs bool
	// NoNIC is a claim for a job that uses no NIC: GPUs without an
	// aligned NIC first (a prioritized list), any else, so that the GPUs
	// next to NICs stay free for jobs that use them.
	NoNIC bool
}

// Claims is a generated template and how it aligns.
type Claims struct {
	Template *resourcev1.ResourceClaimTemplate `json:"template"`
	Method   string                            `json:"method"`
	Notes    []string                          `json:"notes,omitempty"`
}

// Machine is one machine shape a template is to align on.
type Machine struct {
	Name     string
	Topology *topology.Topology
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
	return BuildClaimsFor([]Machine{{Name: machine, Topology: t}}, o)
}

// EffectiveLevel is level as the machines can tell it: P2C or closer is
// PXB or closer where no machine has a P2C pair (no Grace GPU), and the
// template, its notes and errors then say PXB.
func EffectiveLevel(machines []Machine, level topology.Level) topology.Level {
	if slices.ContainsFunc(machines, func(m Machine) bool { return m.Topology.ShownLevel(level) == level }) {
		return level
	}
	return topology.LevelPXB
}

// BuildClaimsFor makes one template for every machine of a cluster: a pod
// may land on any of them, and a claim cannot know which. Where pcieRoot is
// enough on every machine it aligns by pcieRoot; else one derived attribute
// maps the bus IDs of the machines that need it to their alignment groups
// and every other device to its pcieRoot, and each machine's grouping is
// checked to pair only aligned devices (machines that reuse one bus ID for
// devices that group differently cannot share a template: the error says
// so). The request must fit at least one machine; those it does not fit are
// noted.
func BuildClaimsFor(machines []Machine, o ClaimOptions) (Claims, error) {
	o, err := o.defaulted(machines)
	if err != nil {
		return Claims{}, err
	}
	if o.SharedNICs || o.NoNIC {
		return buildSelector(machines, o)
	}
	out := Claims{Method: MethodPCIeRoot}
	checks := make([]Check, len(machines))
	for i, m := range machines {
		if err := hasPF(m); err != nil {
			return Claims{}, err
		}
		checks[i] = CheckTopology(m.Name, m.Topology, o.MaxLevel)
		if !checks[i].Known {
			return Claims{}, fmt.Errorf("machine %s: %s", m.Name, checks[i].Why)
		}
		if !checks[i].Enough {
			if !o.Derived {
				return Claims{}, fmt.Errorf("on %s pcieRoot is not enough (%s): allow a derived attribute (--derived, needs the DRADerivedAttributes feature gate) or pick another shape",
					m.Name, checks[i].shortfall())
			}
			out.Method = MethodDerived
			out.Notes = append(out.Notes, fmt.Sprintf("pcieRoot is not enough on %s: %s; the template maps each device's %s to its alignment group with a derived attribute (%s), which needs the DRADerivedAttributes feature gate (alpha in Kubernetes 1.37) on the apiserver and the scheduler",
				m.Name, checks[i].shortfall(), AttrPCIBusID, SwitchAttr))
		}
	}
	units, l, err := machineUnits(machines, checks, out.Method, o.MaxLevel)
	if err != nil {
		return Claims{}, err
	}
	notes, err := fitsSome(machines, units, o)
	if err != nil {
		return Claims{}, err
	}
	out.Notes = append(out.Notes, notes...)
	var derived []resourcev1.DeviceDerivedAttribute
	if out.Method == MethodDerived {
		derived = []resourcev1.DeviceDerivedAttribute{{Name: SwitchAttr, Expression: l.expression()}}
	}
	out.Template = &resourcev1.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: PairSpec(o, derived)},
	}
	return out, nil
}

// defaulted fills o's defaults for machines and checks the request.
func (o ClaimOptions) defaulted(machines []Machine) (ClaimOptions, error) {
	if o.GPUsPerNIC == 0 {
		o.GPUsPerNIC = 1
	}
	if o.MaxLevel == 0 {
		o.MaxLevel = config.DefaultLevel()
	}
	o.MaxLevel = EffectiveLevel(machines, o.MaxLevel)
	if o.GPUClass == "" {
		o.GPUClass = GPUClass
	}
	if o.NICClass == "" {
		o.NICClass = NICClass
	}
	switch {
	case len(machines) == 0:
		return o, fmt.Errorf("no machine to build a template for")
	case o.GPUs <= 0:
		return o, fmt.Errorf("--gpus %d: want at least 1", o.GPUs)
	case o.GPUsPerNIC < 1:
		return o, fmt.Errorf("--gpus-per-nic %d: want at least 1", o.GPUsPerNIC)
	case o.GPUs%o.GPUsPerNIC != 0:
		return o, fmt.Errorf("--gpus %d is not a multiple of --gpus-per-nic %d", o.GPUs, o.GPUsPerNIC)
	}
	return o, nil
}

// machineUnits are each machine's aligned units: its pcieRoots, or with
// the derived method the labeler's alignment groups.
func machineUnits(machines []Machine, checks []Check, method string, maxLevel topology.Level) ([][]unit, labeler, error) {
	units := make([][]unit, len(machines))
	var l labeler
	if method == MethodPCIeRoot {
		for i, m := range machines {
			units[i] = rootUnits(m.Topology)
		}
		return units, l, nil
	}
	l, err := newLabeler(machines, checks, maxLevel)
	if err != nil {
		return nil, l, err
	}
	for i, m := range machines {
		if units[i], err = l.units(m, maxLevel); err != nil {
			return nil, l, err
		}
	}
	return units, l, nil
}

// fitsSome checks that the request fits one machine at least: a single
// machine's error says why it does not; with several, those it does not
// fit are notes.
func fitsSome(machines []Machine, units [][]unit, o ClaimOptions) ([]string, error) {
	groups := o.GPUs / o.GPUsPerNIC
	var misfits []string
	for i, m := range machines {
		if err := fits(m, units[i], o, groups); err != nil {
			if len(machines) == 1 {
				return nil, err
			}
			misfits = append(misfits, err.Error())
		}
	}
	if len(misfits) == len(machines) {
		return nil, fmt.Errorf("the request fits none of the machines: %s", strings.Join(misfits, "; "))
	}
	var notes []string
	for _, m := range misfits {
		notes = append(notes, "pods of this template cannot run on every machine: "+m)
	}
	return notes, nil
}

// PairSpec is the claim's structure: per group a request of GPUsPerNIC
// GPUs and one of a NIC, matched on pcieRoot, or on the derived attribute
// when one is given. It checks nothing against a machine (BuildClaims does).
func PairSpec(o ClaimOptions, derived []resourcev1.DeviceDerivedAttribute) resourcev1.ResourceClaimSpec {
	if o.GPUsPerNIC < 1 {
		o.GPUsPerNIC = 1
	}
	if o.GPUClass == "" {
		o.GPUClass = GPUClass
	}
	if o.NICClass == "" {
		o.NICClass = NICClass
	}
	spec := resourcev1.ResourceClaimSpec{}
	for i := 0; i < o.GPUs/o.GPUsPerNIC; i++ {
		g, n := "gpus-"+strconv.Itoa(i), "nic-"+strconv.Itoa(i)
		gpuReq := resourcev1.ExactDeviceRequest{DeviceClassName: o.GPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(o.GPUsPerNIC)}
		nicReq := resourcev1.ExactDeviceRequest{DeviceClassName: o.NICClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
		attr := resourcev1.FullyQualifiedName(AttrPCIeRoot)
		if len(derived) > 0 {
			gpuReq.DerivedAttributes, nicReq.DerivedAttributes = derived, derived
			attr = resourcev1.FullyQualifiedName(derived[0].Name)
		}
		spec.Devices.Requests = append(spec.Devices.Requests,
			resourcev1.DeviceRequest{Name: g, Exactly: &gpuReq},
			resourcev1.DeviceRequest{Name: n, Exactly: &nicReq})
		spec.Devices.Constraints = append(spec.Devices.Constraints, resourcev1.DeviceConstraint{Requests: []string{g, n}, MatchAttribute: &attr})
	}
	return spec
}

// fits says why groups groups of o.GPUsPerNIC GPUs, each with an aligned
// NIC, do not fit machine m grouped into units; nil when they do.
func fits(m Machine, units []unit, o ClaimOptions, groups int) error {
	if o.GPUs > len(m.Topology.GPUs) {
		return fmt.Errorf("%d GPUs: machine %s has %d", o.GPUs, m.Name, len(m.Topology.GPUs))
	}
	capacity, largest := 0, 0
	for _, u := range units {
		if len(u.nics) == 0 {
			continue
		}
		largest = max(largest, len(u.gpus))
		capacity += min(len(u.gpus)/o.GPUsPerNIC, len(u.nics))
	}
	if largest < o.GPUsPerNIC {
		return fmt.Errorf("%d GPUs per NIC is larger than any switch of %s: at most %d GPUs share a NIC at %s or closer", o.GPUsPerNIC, m.Name, largest, o.MaxLevel)
	}
	if capacity < groups {
		return fmt.Errorf("%d groups of %d GPUs, each with its own aligned NIC: %s has room for %d", groups, o.GPUsPerNIC, m.Name, capacity)
	}
	return nil
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

// labeler is what the derived attribute computes, in Go: a device's
// alignment group from its bus ID where a machine needs one, else (when
// other machines align by root) its pcieRoot. The CEL of expression and
// label agree; TestBuildClaimsDerived and TestBuildClaimsMixed check that
// with the DRA library's own CEL.
type labeler struct {
	// groups maps a device's key (its bus ID; with several machines its
	// pcieRoot and bus ID, as machines reuse bus IDs, less often under the
	// same root name) to its group.
	groups map[string]string
	// byRoot: devices not in groups are labelled by pcieRoot (a cluster
	// that mixes machines); else each is a group of its own.
	byRoot bool
}

// newLabeler maps the devices of the machines whose check is not enough.
// With one such machine and nothing else its groups are named group-N;
// with several they are named by machine, and a device key two machines
// group differently is refused.
func newLabeler(machines []Machine, checks []Check, maxLevel topology.Level) (labeler, error) {
	l := labeler{groups: map[string]string{}, byRoot: len(machines) > 1}
	owner := map[string]string{}
	for i, m := range machines {
		if checks[i].Enough {
			continue
		}
		units, err := alignedUnits(m.Topology, maxLevel)
		if err != nil {
			return l, fmt.Errorf("machine %s: %w", m.Name, err)
		}
		rootOf := map[string]string{}
		for _, g := range m.Topology.GPUs {
			rootOf[g.PCI.Address] = g.PCI.RootComplex
		}
		for _, n := range m.Topology.NICs {
			rootOf[n.PCI.Address] = n.PCI.RootComplex
		}
		for _, u := range units {
			name := u.name
			if len(machines) > 1 {
				name = m.Name + "/" + u.name
			}
			all := append(append([]string(nil), u.gpus...), u.nics...)
			for _, bus := range all {
				k := l.key(rootOf[bus], bus)
				g := name
				if len(u.gpus) == 0 || len(u.nics) == 0 {
					// No aligned pair to make: a group of its own, so that
					// in a mixed cluster it does not fall back to its root.
					if !l.byRoot {
						continue
					}
					g = "unmapped/" + bus
				}
				if prev, ok := l.groups[k]; ok && prev != g {
					return l, fmt.Errorf("machines %s and %s both have a device at %s under root %s but group it differently: one derived attribute cannot align both; generate a template per machine and keep each to its nodes", owner[k], m.Name, bus, rootOf[bus])
				}
				l.groups[k], owner[k] = g, m.Name
			}
		}
	}
	return l, nil
}

// label is the derived attribute's value for a device.
func (l labeler) label(bus, root string) string {
	if g, ok := l.groups[l.key(root, bus)]; ok {
		return g
	}
	if l.byRoot && root != "" {
		return "root/" + root
	}
	return "unmapped/" + bus
}

// units groups m's GPUs and PF NICs by label and checks that every GPU-NIC
// pair a label puts together is aligned: a machine that aligns by root
// but shares bus IDs with one that needs groups could otherwise be paired
// across its switches.
func (l labeler) units(m Machine, maxLevel topology.Level) ([]unit, error) {
	t := m.Topology
	byLabel := map[string]*unit{}
	var order []string
	get := func(name string) *unit {
		if byLabel[name] == nil {
			byLabel[name] = &unit{name: name}
			order = append(order, name)
		}
		return byLabel[name]
	}
	for _, g := range t.GPUs {
		u := get(l.label(g.PCI.Address, g.PCI.RootComplex))
		u.gpus = append(u.gpus, g.PCI.Address)
	}
	for _, n := range t.NICs {
		if n.PhysFn == "" {
			u := get(l.label(n.PCI.Address, n.PCI.RootComplex))
			u.nics = append(u.nics, n.PCI.Address)
		}
	}
	m2 := t.Matrix()
	ng := len(t.GPUs)
	for i, g := range t.GPUs {
		hasAligned, paired := false, false
		for j, n := range t.NICs {
			if n.PhysFn != "" {
				continue
			}
			lv := m2.Cells[i][ng+j].Level
			same := l.label(g.PCI.Address, g.PCI.RootComplex) == l.label(n.PCI.Address, n.PCI.RootComplex)
			if lv > maxLevel && same {
				return nil, fmt.Errorf("machine %s: GPU %s and NIC %s are %s apart but one derived attribute groups them (another machine of the cluster has devices at the same addresses): generate a template per machine and keep each to its nodes", m.Name, g.PCI.Address, n.Name, lv)
			}
			hasAligned, paired = hasAligned || lv <= maxLevel, paired || same
		}
		if hasAligned && !paired {
			return nil, fmt.Errorf("machine %s: GPU %s has an aligned NIC, but one derived attribute groups it with none (another machine of the cluster has devices at the same addresses): generate a template per machine and keep each to its nodes", m.Name, g.PCI.Address)
		}
	}
	sort.Strings(order)
	out := make([]unit, 0, len(order))
	for _, name := range order {
		out = append(out, *byLabel[name])
	}
	return out, nil
}

// expression is the derived attribute's CEL: a device's
// resource.kubernetes.io/pciBusID looked up in the groups, else its
// pcieRoot (byRoot) or a value of its own (its bus ID, or its driver when
// it has none), so that it matches nothing by accident.
func (l labeler) expression() string {
	var entries []string
	for _, k := range slices.Sorted(maps.Keys(l.groups)) {
		entries = append(entries, strconv.Quote(k)+": "+strconv.Quote(l.groups[k]))
	}
	const bus = `device.attributes["` + Domain + `"].pciBusID`
	const root = `device.attributes["` + Domain + `"].pcieRoot`
	m := `{` + strings.Join(entries, ", ") + `}`
	k, fallback := bus, `"unmapped/" + `+bus
	if l.byRoot {
		// A device without pcieRoot is keyed as under root "" (key).
		k = `((has(` + root + `) ? ` + root + ` : "") + "|" + ` + bus + `)`
		fallback = `(has(` + root + `) ? "root/" + ` + root + ` : "unmapped/" + ` + bus + `)`
	}
	return `!has(` + bus + `) ? "unmapped/" + device.driver : ` +
		`(` + k + ` in ` + m + ` ? ` + m + `[` + k + `] : ` + fallback + `)`
}

// key is a device's key in the groups: its bus ID on one machine, its root
// complex and bus ID on several.
func (l labeler) key(root, bus string) string {
	if !l.byRoot {
		return bus
	}
	return root + "|" + bus
}

// buildSelector is the template for shared NICs (or, NoNIC, for GPUs
// alone, aligned ones last): o.GPUs GPUs among those
// with an RDMA NIC at o.MaxLevel or closer, chosen by a CEL selector on
// their bus IDs (with several machines, pcieRoot and bus ID), and every
// NIC. It has no constraints, so the scheduler's allocator picks GPUs
// without the backtracking that a pair per GPU costs, and it needs no
// alpha feature. A bus ID that is aligned on one machine and not on
// another is refused, as is a request no machine has room for.
func buildSelector(machines []Machine, o ClaimOptions) (Claims, error) {
	out := Claims{Method: MethodSelector, Notes: []string{
		"the claim takes every NIC, shared: the NIC driver must publish its NICs with allowMultipleAllocations (consumable capacity, beta and on by default since Kubernetes 1.36), as the RDMA shared device plugin hands every HCA to every pod; NCCL uses each GPU's nearest NIC, which the selector makes one at " + o.MaxLevel.String() + " or closer",
	}}
	if o.NoNIC {
		out.Notes = []string{"GPUs for a job that uses no NIC: first those without a NIC at " + o.MaxLevel.String() + " or closer (a prioritized list, firstAvailable), any GPUs when too few of those are free, so that the GPUs next to NICs stay free for jobs that use them"}
	}
	multi := len(machines) > 1
	keyOf := func(pci topology.PCIFunction) string {
		if multi {
			return pci.RootComplex + "|" + pci.Address
		}
		return pci.Address
	}
	aligned := make([]map[string]bool, len(machines)) // per machine, by key
	selected := map[string]bool{}
	for i, m := range machines {
		t := m.Topology
		if err := hasPF(m); err != nil && !o.NoNIC {
			return Claims{}, err
		}
		if multi && t.Source != "sysfs" {
			return Claims{}, fmt.Errorf("machine %s: %s", m.Name, CheckTopology(m.Name, t, o.MaxLevel).Why)
		}
		aligned[i] = map[string]bool{}
		mx := t.Matrix()
		for gi, g := range t.GPUs {
			for j, n := range t.NICs {
				if n.PhysFn == "" && mx.Cells[gi][len(t.GPUs)+j].Level <= o.MaxLevel {
					aligned[i][keyOf(g.PCI)] = true
					selected[keyOf(g.PCI)] = true
				}
			}
		}
	}
	var misfits []string
	for i, m := range machines {
		for _, g := range m.Topology.GPUs {
			// A GPU taken for aligned where it is not would be handed to an
			// RDMA job; for a job without a NIC it only moves a preference.
			if k := keyOf(g.PCI); selected[k] && !aligned[i][k] && !o.NoNIC {
				return Claims{}, fmt.Errorf("machine %s: GPU %s has no NIC at %s or closer, but another machine has an aligned GPU at the same address: generate a template per machine and keep each to its nodes", m.Name, g.PCI.Address, o.MaxLevel)
			}
		}
		switch n := len(aligned[i]); {
		case o.GPUs > len(m.Topology.GPUs):
			misfits = append(misfits, fmt.Sprintf("%d GPUs: machine %s has %d", o.GPUs, m.Name, len(m.Topology.GPUs)))
		case o.GPUs > n && !o.NoNIC:
			misfits = append(misfits, fmt.Sprintf("%d GPUs, each with an aligned NIC: %s has %d such GPUs", o.GPUs, m.Name, n))
		}
	}
	switch {
	case len(misfits) == 1 && len(machines) == 1:
		return Claims{}, errors.New(misfits[0])
	case len(misfits) == len(machines):
		return Claims{}, fmt.Errorf("the request fits none of the machines: %s", strings.Join(misfits, "; "))
	}
	for _, m := range misfits {
		out.Notes = append(out.Notes, "pods of this template cannot run on every machine: "+m)
	}

	requests := selectorRequests(o, slices.Sorted(maps.Keys(selected)), multi)
	out.Template = &resourcev1.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}}},
	}
	return out, nil
}

// selectorRequests are the requests of a selector template: GPUs whose key
// (the bus ID, with several machines the pcieRoot too) is among aligned,
// with every NIC; for a job without a NIC, GPUs outside aligned first.
func selectorRequests(o ClaimOptions, aligned []string, multi bool) []resourcev1.DeviceRequest {
	var keys []string
	for _, k := range aligned {
		keys = append(keys, strconv.Quote(k))
	}
	const bus = `device.attributes["` + Domain + `"].pciBusID`
	const root = `device.attributes["` + Domain + `"].pcieRoot`
	key := bus
	cond := `has(` + bus + `)`
	if multi {
		key = root + ` + "|" + ` + bus
		cond += ` && has(` + root + `)`
	}
	isAligned := cond + ` && ` + key + ` in [` + strings.Join(keys, ", ") + `]`
	switch {
	case o.NoNIC && len(keys) == 0:
		return []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: o.GPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(o.GPUs)}}}
	case o.NoNIC:
		return []resourcev1.DeviceRequest{{Name: "gpus", FirstAvailable: []resourcev1.DeviceSubRequest{
			{Name: "apart", DeviceClassName: o.GPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(o.GPUs),
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `!(` + isAligned + `)`}}}},
			{Name: "any", DeviceClassName: o.GPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(o.GPUs)},
		}}}
	default:
		return []resourcev1.DeviceRequest{
			{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: o.GPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(o.GPUs),
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: isAligned}}}}},
			{Name: "nics", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: o.NICClass, AllocationMode: resourcev1.DeviceAllocationModeAll}},
		}
	}
}

// hasPF refuses a machine with no RDMA NIC (PF): nothing to align with.
func hasPF(m Machine) error {
	for _, n := range m.Topology.NICs {
		if n.PhysFn == "" {
			return nil
		}
	}
	return fmt.Errorf("machine %s has no RDMA NIC: nothing to align its GPUs with", m.Name)
}
