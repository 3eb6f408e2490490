package topology

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// HostData is what discovery read off a host, before interpretation. The sysfs
// and NVML readers fill it; FromHostData turns it into a Topology without I/O,
// which is what tests and fuzzers call.
type HostData struct {
	// PCI holds every PCI function of the host (/sys/bus/pci/devices).
	PCI []PCIRecord
	// RDMA holds every RDMA device (/sys/class/infiniband).
	RDMA []RDMARecord
	// NUMANodes from /sys/devices/system/node.
	NUMANodes []NUMANode
	// NVML holds the GPUs as NVML reports them; nil when NVML was not used.
	NVML *NVMLData
	// Notes are passed through to the Topology.
	Notes []string
	// GPUDirect are the host facts GPUDirect RDMA depends on (nil: none read).
	GPUDirect *GPUDirect
}

// PCIRecord is one PCI function as sysfs shows it.
type PCIRecord struct {
	Address string
	// Path is the function's real sysfs path below the sysfs root, e.g.
	// "devices/pci0000:00/0000:00:01.0/0000:01:00.0".
	Path   string
	Vendor uint16
	Device uint16
	Class  uint32
	// NUMANode as the kernel reports it (-1: unknown).
	NUMANode  int
	LocalCPUs string
	// SR-IOV: PhysFn is set on VFs, TotalVFs and VFs on PFs.
	PhysFn   string
	TotalVFs int
	VFs      []string
	// ACS of a bridge (ACSRedirect, ACSOff, "" unknown).
	ACS string
	// MemoryNUMANode is, for a GPU, the NUMA node the NVIDIA driver manages
	// its memory as (its numa_status), which it does only on coherent C2C
	// systems; nil when it says none or there is no such file.
	MemoryNUMANode *int
	// VPDUnique is the read-only "VU" keyword of the function's VPD, read
	// for Mellanox functions: what ties a ConnectX NIC to its Data Direct
	// function. Empty when there is none or it could not be read.
	VPDUnique string
}

// RDMARecord is one RDMA device.
type RDMARecord struct {
	Name       string
	PCIAddress string
	Ports      []Port
	Netdevs    []string
	// UVerbs is the verbs device ("uverbs0"), No, or "" unknown.
	UVerbs string
}

// NVMLData is what NVML says about the GPUs.
type NVMLData struct {
	GPUs    []NVMLGPU
	NVLinks []NVLink
}

// NVMLGPU is one GPU as NVML reports it.
type NVMLGPU struct {
	Index int
	UUID  string
	Name  string
	BusID string
	// MemoryNUMANode is the NUMA node of GPU memory (-1: none).
	MemoryNUMANode int
	// C2C is set when NVML counts an active C2C link to the CPU.
	C2C bool
	// NVLinkDomain is the GPU's multi-node NVLink domain as NVML's fabric
	// info names it ("<cluster UUID>/<clique>"), "" outside one.
	NVLinkDomain string
}

const (
	vendorNVIDIA = 0x10de
	// PCI base class 0x03 (display): 0x0300 VGA, 0x0302 3D controller.
	classVGA        = 0x030000
	class3D         = 0x030200
	classBridgePCI  = 0x060400
	classMaskNoProg = 0xffff00
)

var rootComplexRE = regexp.MustCompile(`^pci([0-9a-f]{4,8}):([0-9a-f]{2})$`)

// IsNVIDIAGPU reports whether a PCI function is an NVIDIA display or 3D controller.
func IsNVIDIAGPU(vendor uint16, class uint32) bool {
	c := class & classMaskNoProg
	return vendor == vendorNVIDIA && (c == classVGA || c == class3D)
}

// FromHostData builds the Topology of a host from what discovery read. GPUs
// come from NVML when it is there (its index, UUID and NVLinks), otherwise from
// the PCI functions that are NVIDIA display or 3D controllers, numbered in PCI
// address order as NVML does.
func FromHostData(h HostData) (*Topology, error) {
	t := &Topology{Source: "sysfs", GPUDirect: h.GPUDirect, NUMANodes: append([]NUMANode(nil), h.NUMANodes...), Notes: append([]string(nil), h.Notes...)}
	byAddr := make(map[string]*PCIRecord, len(h.PCI))
	funcs := make(map[string]PCIFunction, len(h.PCI))
	rcs := map[string]*RootComplex{}
	rcFirst := map[string]string{}
	bridgeSeen := map[string]bool{}
	for i := range h.PCI {
		r := &h.PCI[i]
		addr, err := NormalizeBusID(r.Address)
		if err != nil {
			return nil, fmt.Errorf("PCI device %q: %w", r.Address, err)
		}
		if _, dup := byAddr[addr]; dup {
			return nil, fmt.Errorf("PCI device %s listed twice", addr)
		}
		byAddr[addr] = r
	}
	for i := range h.PCI {
		r := &h.PCI[i]
		addr, _ := NormalizeBusID(r.Address)
		rc, chain, err := splitPath(addr, r.Path)
		if err != nil {
			return nil, err
		}
		f := PCIFunction{Address: addr, Vendor: r.Vendor, Device: r.Device, Class: r.Class, NUMANode: r.NUMANode, RootComplex: rc, Bridges: chain}
		funcs[addr] = f
		if existing, ok := rcs[rc]; !ok {
			rcs[rc] = &RootComplex{ID: rc, NUMANode: r.NUMANode}
			rcFirst[rc] = addr
		} else if existing.NUMANode >= 0 && r.NUMANode >= 0 && existing.NUMANode != r.NUMANode {
			return nil, fmt.Errorf("PCI device %s says NUMA node %d but %s under the same host bridge %s says %d: a host bridge cannot sit on two NUMA nodes",
				addr, r.NUMANode, rcFirst[rc], rc, existing.NUMANode)
		} else if existing.NUMANode < 0 {
			existing.NUMANode = r.NUMANode
		}
		for _, b := range chain {
			if bridgeSeen[b] {
				continue
			}
			br, ok := byAddr[b]
			if !ok {
				return nil, fmt.Errorf("PCI device %s: bridge %s on its path is not a PCI device of this host", addr, b)
			}
			bridgeSeen[b] = true
			t.Bridges = append(t.Bridges, Bridge{Address: b, Vendor: br.Vendor, Device: br.Device, ACS: br.ACS})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(rcs)) {
		t.RootComplexes = append(t.RootComplexes, *rcs[id])
	}
	sort.Slice(t.Bridges, func(i, j int) bool { return t.Bridges[i].Address < t.Bridges[j].Address })

	if err := t.addGPUs(h, byAddr, funcs); err != nil {
		return nil, err
	}
	for _, rd := range h.RDMA {
		addr, err := NormalizeBusID(rd.PCIAddress)
		if err != nil {
			return nil, fmt.Errorf("RDMA device %s: %w", rd.Name, err)
		}
		f, ok := funcs[addr]
		if !ok {
			return nil, fmt.Errorf("RDMA device %s: its PCI device %s is not a PCI device of this host", rd.Name, addr)
		}
		r := byAddr[addr]
		t.NICs = append(t.NICs, NIC{
			Name: rd.Name, PCI: f, Ports: rd.Ports, Netdevs: rd.Netdevs,
			PhysFn: r.PhysFn, TotalVFs: r.TotalVFs, VFs: r.VFs, UVerbs: rd.UVerbs,
		})
	}
	t.linkDataDirect(byAddr, funcs)
	t.Sort()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Topology) addGPUs(h HostData, byAddr map[string]*PCIRecord, funcs map[string]PCIFunction) error {
	if h.NVML != nil {
		t.NVML = true
		for _, g := range h.NVML.GPUs {
			addr, err := NormalizeBusID(g.BusID)
			if err != nil {
				return fmt.Errorf("NVML GPU %d: %w", g.Index, err)
			}
			f, ok := funcs[addr]
			if !ok {
				return fmt.Errorf("NVML GPU %d (%s) at %s: sysfs has no such PCI device", g.Index, g.UUID, addr)
			}
			gpu := GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, PCI: f, CPUAffinity: byAddr[addr].LocalCPUs, MemoryNUMANode: g.MemoryNUMANode, NVLinkDomain: g.NVLinkDomain}
			if g.C2C {
				gpu.C2C = C2CNVML
			} else if byAddr[addr].MemoryNUMANode != nil {
				gpu.C2C = C2CNUMAStatus
			}
			if n := byAddr[addr].MemoryNUMANode; gpu.MemoryNUMANode < 0 && n != nil {
				gpu.MemoryNUMANode = *n
			}
			t.GPUs = append(t.GPUs, gpu)
		}
		t.NVLinks = append(t.NVLinks, h.NVML.NVLinks...)
		return nil
	}
	var addrs []string
	for addr, r := range byAddr {
		if IsNVIDIAGPU(r.Vendor, r.Class) {
			addrs = append(addrs, addr)
		}
	}
	sort.Strings(addrs)
	for i, addr := range addrs {
		gpu := GPU{Index: i, PCI: funcs[addr], CPUAffinity: byAddr[addr].LocalCPUs, MemoryNUMANode: -1}
		if n := byAddr[addr].MemoryNUMANode; n != nil {
			gpu.MemoryNUMANode, gpu.C2C = *n, C2CNUMAStatus
		}
		t.GPUs = append(t.GPUs, gpu)
	}
	return nil
}

// splitPath reads a real sysfs path into the root complex and the bridges
// between it and the function. Anything above the root complex (ACPI or VMBus
// nodes in VMs) is ignored.
func splitPath(addr, path string) (rc string, chain []string, err error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	at := -1
	for i, p := range parts {
		if rootComplexRE.MatchString(p) {
			at = i
		}
	}
	if at < 0 {
		return "", nil, fmt.Errorf("PCI device %s: path %q has no host bridge (pciDDDD:BB) in it", addr, path)
	}
	rest := parts[at+1:]
	if len(rest) == 0 || rest[len(rest)-1] != addr {
		return "", nil, fmt.Errorf("PCI device %s: path %q does not end at the device", addr, path)
	}
	for _, p := range rest[:len(rest)-1] {
		b, err := NormalizeBusID(p)
		if err != nil || b != p {
			return "", nil, fmt.Errorf("PCI device %s: path %q has %q where a bridge address belongs", addr, path, p)
		}
		chain = append(chain, b)
	}
	return parts[at], chain, nil
}

// Data Direct functions: ConnectX-8's DMA interface (the kernel's
// mlx5_data_direct driver binds 0x15b3:0x2100).
const (
	vendorMellanox   = 0x15b3
	deviceDataDirect = 0x2100
)

// IsDataDirect reports whether a PCI function is a ConnectX Data Direct function.
func IsDataDirect(vendor, device uint16) bool {
	return vendor == vendorMellanox && device == deviceDataDirect
}

// linkDataDirect gives each RDMA device the Data Direct function whose VPD
// "VU" equals its own (a VF's: its PF's), as the kernel's mlx5 driver
// matches them. A value two Data Direct functions share links neither, and
// a Data Direct function no NIC matches (its VPD unreadable, say) is a
// note: nothing is guessed.
func (t *Topology) linkDataDirect(byAddr map[string]*PCIRecord, funcs map[string]PCIFunction) {
	byVU := map[string][]string{}
	var dds []string
	for addr, r := range byAddr {
		if IsDataDirect(r.Vendor, r.Device) {
			dds = append(dds, addr)
			if r.VPDUnique != "" {
				byVU[r.VPDUnique] = append(byVU[r.VPDUnique], addr)
			}
		}
	}
	if len(dds) == 0 {
		return
	}
	sort.Strings(dds)
	linked := map[string]bool{}
	for i := range t.NICs {
		n := &t.NICs[i]
		r := byAddr[n.PCI.Address]
		if pf, ok := byAddr[n.PhysFn]; ok && n.PhysFn != "" {
			r = pf
		}
		if r == nil || r.VPDUnique == "" {
			continue
		}
		switch m := byVU[r.VPDUnique]; len(m) {
		case 0:
		case 1:
			f := funcs[m[0]]
			n.DataDirect = &f
			linked[m[0]] = true
		default:
			t.Notes = append(t.Notes, fmt.Sprintf("RDMA device %s: Data Direct functions %s share its VPD unique ID; none is used", n.Name, strings.Join(m, ", ")))
		}
	}
	for _, dd := range dds {
		if !linked[dd] {
			t.Notes = append(t.Notes, fmt.Sprintf("Data Direct function %s: no RDMA device has its VPD unique ID (VPD unreadable without root?); NCCL's path to its NIC is measured from the NIC", dd))
		}
	}
}
