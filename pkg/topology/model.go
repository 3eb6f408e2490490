// Package topology is the PCIe model of a GPU node and the level (PIX, PXB, PHB,
// NODE, SYS, NV#) between every pair of its GPUs and RDMA devices, with the
// meanings `nvidia-smi topo -m` prints.
//
// The package is pure: it does no I/O. Discovery lives beside it (sysfs, NVML,
// NCCL topology XML) and hands it data; tests build the same data by hand.
package topology

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Topology is one node's GPUs, RDMA devices and the PCIe tree that joins them.
type Topology struct {
	// Source says where the data came from ("sysfs", "nccl-xml", ...).
	Source string `json:"source"`
	// NVML is true when GPU identity and NVLinks came from NVML.
	NVML bool `json:"nvml"`
	// Notes are things a reader of the matrix should know (NVML not used, ...).
	Notes []string `json:"notes,omitempty"`

	NUMANodes     []NUMANode    `json:"numaNodes,omitempty"`
	RootComplexes []RootComplex `json:"rootComplexes"`
	Bridges       []Bridge      `json:"bridges,omitempty"`
	GPUs          []GPU         `json:"gpus"`
	NICs          []NIC         `json:"nics"`
	NVLinks       []NVLink      `json:"nvlinks,omitempty"`
	// GPUDirect are the host facts GPUDirect RDMA depends on; nil when the
	// source carries none (NCCL XML, profiles), which reads as all unknown.
	GPUDirect *GPUDirect `json:"gpudirect,omitempty"`
}

// NUMANode is one NUMA node of the host.
type NUMANode struct {
	ID int `json:"id"`
	// CPUs in the kernel's cpulist format ("0-47,96-143").
	CPUs string `json:"cpus"`
	// Distances to every node by ID order, as the kernel's distance file (10 = local).
	Distances []int `json:"distances,omitempty"`
	// MemoryBytes is the node's MemTotal; 0 when unknown (NCCL XML and
	// profiles do not carry it).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// HugePages are the node's persistent huge pages by page size; absent
	// sizes are unknown or none.
	HugePages []HugePages `json:"hugePages,omitempty"`
}

// HugePages counts the huge pages of one size on a NUMA node.
type HugePages struct {
	// PageBytes is the page size (2097152, 1073741824).
	PageBytes int64 `json:"pageBytes"`
	Count     int64 `json:"count"`
}

// RootComplex is a PCIe host bridge ("pci0000:00" in sysfs).
type RootComplex struct {
	ID string `json:"id"`
	// NUMANode is the node the host bridge belongs to; -1 when the kernel does
	// not know (single socket, many VMs), which counts as node 0.
	NUMANode int `json:"numaNode"`
	// Host tells hosts apart in fused multi-host data (NCCL XML host_hash).
	Host string `json:"host,omitempty"`
}

// Bridge is a PCI-to-PCI bridge: a root port or a switch's upstream or downstream port.
type Bridge struct {
	Address string `json:"address"`
	Vendor  uint16 `json:"vendor"`
	Device  uint16 `json:"device"`
	// Synthetic bridges stand for ports that the data source leaves out
	// (NCCL XML names switches, not their ports).
	Synthetic bool `json:"synthetic,omitempty"`
	// ACS is ACSRedirect when the port redirects peer-to-peer requests to
	// the root complex, ACSOff when it does not, "" when unknown.
	ACS string `json:"acs,omitempty"`
}

// PCIFunction is a PCI endpoint function and where it hangs in the tree.
type PCIFunction struct {
	Address string `json:"busID"`
	Vendor  uint16 `json:"vendor"`
	Device  uint16 `json:"device"`
	Class   uint32 `json:"class"`
	// NUMANode as the kernel reports it; -1 counts as node 0.
	NUMANode    int    `json:"numaNode"`
	RootComplex string `json:"rootComplex"`
	// Bridges are the addresses of the bridges between the root complex and the
	// function, root port first.
	Bridges []string `json:"bridges"`
}

// GPU is one GPU.
type GPU struct {
	Index int         `json:"index"`
	UUID  string      `json:"uuid,omitempty"`
	Name  string      `json:"name,omitempty"`
	PCI   PCIFunction `json:"pci"`
	// CPUAffinity is the cpulist of the CPUs local to the GPU.
	CPUAffinity string `json:"cpuAffinity,omitempty"`
	// MemoryNUMANode is the NUMA node of the GPU's own memory on coherent
	// systems (GB200); -1 when the GPU memory is not a NUMA node.
	MemoryNUMANode int `json:"memoryNumaNode"`
	// C2C names where the GPU was found linked to its CPU by NVLink-C2C
	// (Grace): C2CNVML, C2CNUMAStatus or C2CNCCLXML; empty when no source
	// says so (no C2C, or nothing could tell).
	C2C string `json:"c2c,omitempty"`
	// NVLinkDomain is the multi-node NVLink domain the GPU belongs to (a
	// GB200/GB300 NVL72 rack): NVML's fabric cluster UUID and clique,
	// "<uuid>/<clique>"; empty outside one or without NVML.
	NVLinkDomain string `json:"nvlinkDomain,omitempty"`
	// GDR is No when the source says the GPU cannot do GPUDirect RDMA at
	// all (an NCCL dump's gdr="0"), "" when it does not say.
	GDR string `json:"gdr,omitempty"`
}

// Sources of a GPU's C2C link (GPU.C2C).
const (
	// C2CNVML: NVML counts an active C2C link (NVML_FI_DEV_C2C_LINK_COUNT
	// and _GET_STATUS, the fields NCCL reads).
	C2CNVML = "nvml"
	// C2CNUMAStatus: the NVIDIA driver manages the GPU's memory as a NUMA
	// node (/proc/driver/nvidia/gpus/<bus>/numa_status), which it does on
	// coherent C2C systems.
	C2CNUMAStatus = "nvidia-numa-status"
	// C2CNCCLXML: the NCCL topology dump has a <c2c> element for the GPU.
	C2CNCCLXML = "nccl-xml"
)

// NIC is one RDMA device (an entry of /sys/class/infiniband).
type NIC struct {
	Name    string      `json:"name"`
	PCI     PCIFunction `json:"pci"`
	Ports   []Port      `json:"ports,omitempty"`
	Netdevs []string    `json:"netdevs,omitempty"`
	// PhysFn is the PF's address when this RDMA device is an SR-IOV VF.
	PhysFn string `json:"physfn,omitempty"`
	// TotalVFs is what the PF supports (sriov_totalvfs); VFs the addresses of the enabled ones.
	TotalVFs int      `json:"totalVFs,omitempty"`
	VFs      []string `json:"vfs,omitempty"`
	// GDR is No when the source says the NIC cannot do GPUDirect RDMA at
	// all (an NCCL dump's gdr="0"), "" when it does not say.
	GDR string `json:"gdr,omitempty"`
	// UVerbs is the user-space verbs device of the NIC ("uverbs0", what
	// /dev/infiniband/uverbs0 opens); No when the host has none for it, ""
	// when unknown.
	UVerbs string `json:"uverbs,omitempty"`
	// DataDirect is the NIC's Data Direct DMA function (ConnectX-8,
	// 0x15b3:0x2100) when it has one: a PCI function of its own, placed
	// next to a GPU, through which the NIC's DMA to GPU memory goes while
	// its control path stays on the PF. NCCL (NCCL_IB_DATA_DIRECT=1, its
	// default) places the NIC there, so NCCL's path is measured from it;
	// nvidia-smi's level stays the PF's. nil: none, or none known.
	DataDirect *PCIFunction `json:"dataDirect,omitempty"`
}

// DMAFunction is where the NIC's DMA enters the PCIe tree as NCCL's
// defaults see it: its Data Direct function when it has one, else its own.
func (n NIC) DMAFunction() PCIFunction {
	if n.DataDirect != nil {
		return *n.DataDirect
	}
	return n.PCI
}

// Port is one port of an RDMA device.
type Port struct {
	Number int `json:"number"`
	// LinkLayer is "InfiniBand" or "Ethernet".
	LinkLayer string `json:"linkLayer,omitempty"`
	// State as the kernel words it without the number ("ACTIVE", "DOWN").
	State string `json:"state,omitempty"`
	Rate  string `json:"rate,omitempty"`
	// PhysState is the physical link state without the number ("LinkUp",
	// "Polling", "Disabled").
	PhysState string `json:"physState,omitempty"`
	// MTU is the MTU of the port's netdev (0: unknown).
	MTU int `json:"mtu,omitempty"`
	// RoCEv2 is Yes when an Ethernet port has a RoCE v2 GID, No when it has
	// none, "" when unknown or not Ethernet.
	RoCEv2 string `json:"rocev2,omitempty"`
}

// NVLink is a bonded set of NVLinks between two GPUs, by GPU index.
type NVLink struct {
	GPU   int `json:"gpu"`
	Peer  int `json:"peer"`
	Count int `json:"count"`
}

// Up reports whether some port of the NIC is ACTIVE, or no port reports a
// state at all (NCCL XML carries none): only a NIC known to be down is down.
func (n NIC) Up() bool {
	known := false
	for _, p := range n.Ports {
		if p.State == "ACTIVE" {
			return true
		}
		known = known || p.State != ""
	}
	return !known
}

// Validate checks the references inside t: every function's root complex and
// bridges exist, addresses and GPU indices are unique, one root complex does not
// span NUMA nodes. Errors name the device.
func (t *Topology) Validate() error {
	fc := functionChecker{rcs: make(map[string]RootComplex, len(t.RootComplexes)), bridges: make(map[string]bool, len(t.Bridges)), seen: map[string]string{}}
	for _, rc := range t.RootComplexes {
		if rc.ID == "" {
			return fmt.Errorf("root complex with an empty ID")
		}
		if _, dup := fc.rcs[rc.ID]; dup {
			return fmt.Errorf("root complex %s listed twice", rc.ID)
		}
		fc.rcs[rc.ID] = rc
	}
	for _, b := range t.Bridges {
		fc.bridges[b.Address] = true
		if !oneOf(b.ACS, ACSRedirect, ACSOff) {
			return fmt.Errorf("bridge %s: ACS %q, want %q, %q or empty (unknown)", b.Address, b.ACS, ACSRedirect, ACSOff)
		}
	}
	if err := t.GPUDirect.validate(); err != nil {
		return err
	}
	indices, err := t.validateGPUs(&fc)
	if err != nil {
		return err
	}
	if err := t.validateNICs(&fc); err != nil {
		return err
	}
	for _, l := range t.NVLinks {
		if !indices[l.GPU] || !indices[l.Peer] {
			return fmt.Errorf("NVLink between GPU %d and GPU %d names a GPU that is not there", l.GPU, l.Peer)
		}
		if l.Count <= 0 {
			return fmt.Errorf("NVLink between GPU %d and GPU %d has %d links", l.GPU, l.Peer, l.Count)
		}
	}
	return nil
}

// functionChecker checks the PCI functions of one topology against its
// root complexes and bridges. A function holds one GPU, or one or more
// RDMA devices (NCCL XML lists the ports of one function as separate
// devices).
type functionChecker struct {
	rcs     map[string]RootComplex
	bridges map[string]bool
	// seen is what each host/address already belongs to.
	seen map[string]string
}

func (fc *functionChecker) check(what string, f PCIFunction) error {
	if f.Address == "" {
		return fmt.Errorf("%s has no PCI address", what)
	}
	rc, ok := fc.rcs[f.RootComplex]
	if !ok {
		return fmt.Errorf("%s (%s): unknown root complex %q", what, f.Address, f.RootComplex)
	}
	// Fused multi-host data repeats addresses: they are unique per host.
	key := rc.Host + "/" + f.Address
	isNIC := strings.HasPrefix(what, "RDMA")
	if prev, dup := fc.seen[key]; dup && !(isNIC && strings.HasPrefix(prev, "RDMA")) {
		return fmt.Errorf("%s: PCI address %s already belongs to %s", what, f.Address, prev)
	}
	fc.seen[key] = what
	if rc.NUMANode >= 0 && f.NUMANode >= 0 && rc.NUMANode != f.NUMANode {
		return fmt.Errorf("%s (%s) says NUMA node %d but its root complex %s is on NUMA node %d: a device cannot sit on two NUMA nodes",
			what, f.Address, f.NUMANode, rc.ID, rc.NUMANode)
	}
	for _, b := range f.Bridges {
		if !fc.bridges[b] {
			return fmt.Errorf("%s (%s): unknown bridge %q on its path", what, f.Address, b)
		}
	}
	return nil
}

// validateGPUs checks each GPU, and returns the indices it found.
func (t *Topology) validateGPUs(fc *functionChecker) (map[int]bool, error) {
	indices := map[int]bool{}
	for _, g := range t.GPUs {
		what := fmt.Sprintf("GPU %d", g.Index)
		if indices[g.Index] {
			return nil, fmt.Errorf("GPU index %d listed twice", g.Index)
		}
		indices[g.Index] = true
		if err := fc.check(what, g.PCI); err != nil {
			return nil, err
		}
		if err := g.validateFacts(what); err != nil {
			return nil, err
		}
	}
	return indices, nil
}

// validateNICs checks each RDMA device.
func (t *Topology) validateNICs(fc *functionChecker) error {
	names := map[string]bool{}
	for _, n := range t.NICs {
		if n.Name == "" {
			return fmt.Errorf("RDMA device at %s has no name", n.PCI.Address)
		}
		if names[n.Name] {
			return fmt.Errorf("RDMA device %s listed twice", n.Name)
		}
		names[n.Name] = true
		if err := fc.check("RDMA device "+n.Name, n.PCI); err != nil {
			return err
		}
		if dd := n.DataDirect; dd != nil {
			if err := fc.check("RDMA device "+n.Name+"'s Data Direct function", *dd); err != nil {
				return err
			}
		}
		if err := n.validateFacts(); err != nil {
			return err
		}
	}
	return nil
}

// validateFacts checks a GPU's facts beside its place in the tree.
func (g GPU) validateFacts(what string) error {
	switch {
	case len(g.NVLinkDomain) > 64 || !nvlinkDomainRE.MatchString(g.NVLinkDomain):
		return fmt.Errorf("%s: NVLink domain %q is not <uuid>/<clique>", what, g.NVLinkDomain)
	case !oneOf(g.GDR, No):
		return fmt.Errorf("%s: gdr %q, want %q or empty", what, g.GDR, No)
	case !oneOf(g.C2C, C2CNVML, C2CNUMAStatus, C2CNCCLXML):
		return fmt.Errorf("%s: C2C source %q, want %s, %s, %s or empty", what, g.C2C, C2CNVML, C2CNUMAStatus, C2CNCCLXML)
	}
	return nil
}

// validateFacts checks an RDMA device's facts beside its place in the tree.
func (n NIC) validateFacts() error {
	if !oneOf(n.GDR, No) {
		return fmt.Errorf("RDMA device %s: gdr %q, want %q or empty", n.Name, n.GDR, No)
	}
	if n.UVerbs != Unknown && n.UVerbs != No && !uverbsRE.MatchString(n.UVerbs) {
		return fmt.Errorf("RDMA device %s: verbs device %q is not uverbs<N>", n.Name, n.UVerbs)
	}
	for _, p := range n.Ports {
		if p.MTU < 0 || !oneOf(p.RoCEv2, Yes, No) {
			return fmt.Errorf("RDMA device %s port %d: MTU %d or RoCE v2 %q out of range", n.Name, p.Number, p.MTU, p.RoCEv2)
		}
	}
	return nil
}

var uverbsRE = regexp.MustCompile(`^uverbs[0-9]{1,4}$`)

var nvlinkDomainRE = regexp.MustCompile(`^([0-9a-f-]{36}/[0-9]{1,10})?$`)

// oneOf reports whether v is empty (unknown) or one of the values.
func oneOf(v string, values ...string) bool {
	return v == Unknown || slices.Contains(values, v)
}

func (g *GPUDirect) validate() error {
	if g == nil {
		return nil
	}
	for _, f := range []struct {
		name, v string
		ok      []string
	}{
		{"peerMem", g.PeerMem, []string{PeerMemLoaded, PeerMemAbsent}},
		{"nvidiaModule", g.NVIDIAModule, []string{ModuleOpen, ModuleProp, ModuleAbsent}},
		{"iommu", g.IOMMU, []string{IOMMUOff, IOMMUPassthru, IOMMUXlate}},
		{"uverbs", g.UVerbs, []string{Yes}},
	} {
		if !oneOf(f.v, f.ok...) {
			return fmt.Errorf("gpudirect %s %q: want one of %s or empty (unknown)", f.name, f.v, strings.Join(f.ok, ", "))
		}
	}
	for _, d := range g.RDMADrivers {
		if !slices.Contains(RDMADriverModules, d) {
			return fmt.Errorf("gpudirect rdmaDrivers: %q is not one of %s", d, strings.Join(RDMADriverModules, ", "))
		}
	}
	if len(g.KernelRelease) > 256 {
		return fmt.Errorf("gpudirect kernelRelease longer than 256 bytes")
	}
	return nil
}

// Sort puts GPUs in index order and NICs in PCI address order (then name), the
// order nvidia-smi numbers them in.
func (t *Topology) Sort() {
	sort.SliceStable(t.GPUs, func(i, j int) bool { return t.GPUs[i].Index < t.GPUs[j].Index })
	sort.SliceStable(t.NICs, func(i, j int) bool {
		a, b := t.NICs[i], t.NICs[j]
		if a.PCI.Address != b.PCI.Address {
			return a.PCI.Address < b.PCI.Address
		}
		return a.Name < b.Name
	})
}

func effectiveNUMA(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// SwitchOf names the PCIe switch a function hangs under, the unit a GPU and a
// NIC share when they are PIX: the upstream port of the nearest switch (PEX89xxx
// virtual sub-switches folded into their parent), else the root port, else
// the host bridge for functions on the root bus.
func (t *Topology) SwitchOf(f PCIFunction) string {
	chain := newPlacer(t).fold(f.Bridges)
	switch n := len(chain); {
	case n == 0:
		return f.RootComplex
	case n == 1:
		return chain[0]
	case (n-1)%2 == 1:
		return chain[n-1]
	default:
		return chain[n-2]
	}
}

// NUMAOf is the NUMA node a function counts as (-1 reads as 0).
func NUMAOf(f PCIFunction) int { return effectiveNUMA(f.NUMANode) }
