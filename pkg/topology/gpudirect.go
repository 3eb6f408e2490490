package topology

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GPUDirect holds the host-wide facts that decide whether GPUDirect RDMA can
// run at all, as discovery read them. An empty string is "unknown": a fact
// nobody could read is never guessed (NCCL XML and profiles carry none of
// these, and an unprivileged reader cannot see every one).
type GPUDirect struct {
	// PeerMem is "loaded" when nvidia_peermem (or MLNX_OFED's older
	// nv_peer_mem) is a loaded module, "absent" when the module list was
	// readable and it is not there.
	PeerMem string `json:"peerMem,omitempty"`
	// NVIDIAModule is "open" (the open GPU kernel module: its taint has no
	// P), "proprietary", or "absent" (no nvidia module loaded).
	NVIDIAModule string `json:"nvidiaModule,omitempty"`
	// KernelRelease is the running kernel's release ("5.15.0-91-generic").
	KernelRelease string `json:"kernelRelease,omitempty"`
	// IOMMU is "off" (no IOMMU registered), "passthrough" (every GPU's
	// group is identity-mapped) or "translated" (some GPU's DMA goes through
	// IOMMU translation).
	IOMMU string `json:"iommu,omitempty"`
	// UVerbs says whether the RDMA user-space devices could be listed at
	// all: "yes" when /sys/class/infiniband_verbs (what /dev/infiniband/uverbs*
	// are made from) was read, "" when it could not be told.
	UVerbs string `json:"uverbs,omitempty"`
	// RDMADrivers are the RDMA NIC drivers loaded (mlx5_ib, irdma,
	// bnxt_re, ...); nil when the module list was not read.
	RDMADrivers []string `json:"rdmaDrivers,omitempty"`
}

// RDMADriverModules are the kernel modules that register RDMA devices for
// the NICs GPU clusters use.
var RDMADriverModules = []string{"mlx5_ib", "mlx4_ib", "irdma", "bnxt_re", "efa", "ionic_rdma", "erdma", "qedr"}

// Fact values.
const (
	Unknown       = ""
	PeerMemLoaded = "loaded"
	PeerMemAbsent = "absent"
	ModuleOpen    = "open"
	ModuleProp    = "proprietary"
	ModuleAbsent  = "absent"
	IOMMUOff      = "off"
	IOMMUPassthru = "passthrough"
	IOMMUXlate    = "translated"
	Yes           = "yes"
	No            = "no"
	// ACS states of a bridge (Bridge.ACS).
	ACSRedirect = "redirect"
	ACSOff      = "off"
)

// Show spells a fact for people: "unknown" for the empty value.
func Show(fact string) string {
	if fact == Unknown {
		return "unknown"
	}
	return fact
}

// dmaBufKernel is the first Linux release whose RDMA stack can register
// dma-buf memory (ib_umem_dmabuf, 5.12).
var dmaBufKernel = [2]int{5, 12}

// DMABuf says whether GPU memory can reach the NIC through dma-buf instead
// of nvidia-peermem: that needs the open GPU kernel module (the proprietary
// one does not export GPU memory as dma-buf) and Linux 5.12 or later. yes,
// no or unknown, with the reason for no.
func (g GPUDirect) DMABuf() (string, string) {
	switch g.NVIDIAModule {
	case ModuleAbsent:
		return No, "the nvidia kernel module is not loaded"
	case ModuleProp:
		return No, "the nvidia kernel module is the proprietary one; dma-buf needs the open GPU kernel module"
	case ModuleOpen:
	default:
		return Unknown, ""
	}
	v, ok := kernelVersion(g.KernelRelease)
	switch {
	case !ok:
		return Unknown, ""
	case v[0] < dmaBufKernel[0] || v[0] == dmaBufKernel[0] && v[1] < dmaBufKernel[1]:
		return No, fmt.Sprintf("kernel %s is older than 5.12", g.KernelRelease)
	}
	return Yes, ""
}

// kernelVersion reads major and minor from a release string ("6.8.0-45-generic").
func kernelVersion(release string) ([2]int, bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	mn, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || major < 0 || mn < 0 {
		return [2]int{}, false
	}
	return [2]int{major, mn}, true
}

// HostBlock is why GPUDirect RDMA cannot run anywhere on the host, or ""
// when it can or when that is unknown: neither nvidia-peermem nor dma-buf.
func (g GPUDirect) HostBlock() string {
	return HostBlockOf(g.PeerMem, g.dmaBuf())
}

func (g GPUDirect) dmaBuf() string { v, _ := g.DMABuf(); return v }

// HostBlockOf is HostBlock from the two published facts (the scheduler reads
// them from the node's object).
func HostBlockOf(peerMem, dmaBuf string) string {
	if peerMem == PeerMemAbsent && dmaBuf == No {
		return "nvidia-peermem not loaded and dma-buf not usable"
	}
	return ""
}

// PortBlock is why GPUDirect RDMA cannot use a NIC port that is up, or "":
// a RoCE port without a RoCE v2 GID (NCCL uses RoCE v2; without such a GID
// there is no address to reach it at).
func PortBlock(nic string, p Port) string {
	if p.LinkLayer == "Ethernet" && p.RoCEv2 == No {
		return fmt.Sprintf("no RoCE v2 GID on %s port %d", nic, p.Number)
	}
	return ""
}

// ACSOnPath lists the bridges between a GPU and a NIC whose ACS redirects
// peer-to-peer requests: the ports below the point where the two paths
// meet, where a request from one device to the other would turn; ACS
// redirect there sends it up to the root complex. Bridges whose ACS state
// is unknown are in unknown.
func (t *Topology) ACSOnPath(gpu, nic PCIFunction) (redirect, unknown []string) {
	if gpu.RootComplex != nic.RootComplex {
		return nil, nil // the traffic crosses the host bridge anyway
	}
	common := 0
	for common < len(gpu.Bridges) && common < len(nic.Bridges) && gpu.Bridges[common] == nic.Bridges[common] {
		common++
	}
	for _, b := range append(slices.Clone(gpu.Bridges[common:]), nic.Bridges[common:]...) {
		switch t.bridgeACS(b) {
		case ACSRedirect:
			redirect = append(redirect, b)
		case Unknown:
			unknown = append(unknown, b)
		}
	}
	return redirect, unknown
}

// bridgeACS is the ACS state of the bridge at addr (a path holds a few
// bridges, a node some tens: a scan, without building an index per call).
func (t *Topology) bridgeACS(addr string) string {
	if i := slices.IndexFunc(t.Bridges, func(b Bridge) bool { return b.Address == addr }); i >= 0 {
		return t.Bridges[i].ACS
	}
	return Unknown
}

// PathBlocks lists why GPUDirect RDMA cannot run between GPU g and NIC n
// (positions in t.GPUs and t.NICs; a VF is judged by its PF's place in the
// tree, a NIC with a Data Direct function by that function's, where its
// DMA goes): the host's, the NIC port's and ACS on the path. Empty when it
// can, or when nothing known says it cannot.
func (t *Topology) PathBlocks(g, n int) []string {
	var out []string
	if t.GPUDirect != nil {
		if why := t.GPUDirect.HostBlock(); why != "" {
			out = append(out, why)
		}
	}
	nic := t.NICs[n]
	for _, p := range nic.Ports {
		if why := PortBlock(nic.Name, p); why != "" {
			out = append(out, why)
		}
	}
	pci := nic.DMAFunction()
	if nic.PhysFn != "" && nic.DataDirect == nil {
		for _, pf := range t.NICs {
			if pf.PCI.Address == nic.PhysFn {
				pci = pf.DMAFunction()
			}
		}
	}
	redirect, _ := t.ACSOnPath(t.GPUs[g].PCI, pci)
	for _, b := range redirect {
		out = append(out, "ACS redirect on "+b)
	}
	return out
}

// PCI extended capability layout (PCI Express Base Specification, 7.6 and
// 7.7.8): extended capabilities start at 0x100; each header holds the ID in
// bits 0-15 and the next offset in bits 20-31. ACS's control register is at
// +6; bit 2 is P2P Request Redirect, bit 3 P2P Completion Redirect.
const (
	extCapStart   = 0x100
	configSize    = 4096
	extCapIDACS   = 0x000d
	acsCtrlOffset = 6
	acsReqRedir   = 1 << 2
	acsCmplRedir  = 1 << 3
)

// ACSFromConfig reads a bridge's ACS state from its PCI config space as
// sysfs's config file gives it: ACSRedirect when P2P request or completion
// redirect is enabled, ACSOff when it is not or the bridge has no ACS
// capability, Unknown when the extended space is not there (an
// unprivileged read returns only the first 64 bytes). Malformed capability
// lists are errors.
func ACSFromConfig(config []byte) (string, error) {
	if len(config) > configSize {
		return Unknown, fmt.Errorf("config space of %d bytes, at most %d", len(config), configSize)
	}
	if len(config) < extCapStart+4 {
		return Unknown, nil
	}
	off := extCapStart
	// Every header sits at its own dword-aligned offset at or past 0x100,
	// so a list of more than (4096-256)/4 entries loops.
	for steps := 0; ; steps++ {
		if steps > (configSize-extCapStart)/4 {
			return Unknown, fmt.Errorf("extended capability list loops")
		}
		if off+4 > len(config) {
			return Unknown, fmt.Errorf("extended capability at 0x%x runs past the %d bytes read", off, len(config))
		}
		hdr := binary.LittleEndian.Uint32(config[off:])
		if hdr == 0 || hdr == 0xffffffff {
			return ACSOff, nil // no extended capabilities (or a device gone)
		}
		if hdr&0xffff == extCapIDACS {
			if off+acsCtrlOffset+2 > len(config) {
				return Unknown, fmt.Errorf("ACS capability at 0x%x runs past the %d bytes read", off, len(config))
			}
			ctrl := binary.LittleEndian.Uint16(config[off+acsCtrlOffset:])
			if ctrl&(acsReqRedir|acsCmplRedir) != 0 {
				return ACSRedirect, nil
			}
			return ACSOff, nil
		}
		next := int(hdr >> 20)
		if next == 0 {
			return ACSOff, nil
		}
		if next < extCapStart || next%4 != 0 {
			return Unknown, fmt.Errorf("extended capability at 0x%x points to 0x%x, not a dword past 0x100", off, next)
		}
		off = next
	}
}

// ACSConfig builds a config space with an ACS capability whose control
// register is ctrl (tests and fixtures; the inverse of ACSFromConfig).
func ACSConfig(ctrl uint16) []byte {
	b := make([]byte, configSize)
	// An unrelated capability first (AER, ID 1), then ACS at 0x148.
	binary.LittleEndian.PutUint32(b[extCapStart:], 0x0001|1<<16|0x148<<20)
	binary.LittleEndian.PutUint32(b[0x148:], extCapIDACS|1<<16)
	binary.LittleEndian.PutUint16(b[0x148+4:], 0x5f) // capabilities: SV, TB, RR, CR, UF, DT
	binary.LittleEndian.PutUint16(b[0x148+acsCtrlOffset:], ctrl)
	return b
}

// ACSRedirectBits is the control value that turns P2P request and
// completion redirect on (what a BIOS with ACS enabled leaves).
const ACSRedirectBits = acsReqRedir | acsCmplRedir
