package doctor

import (
	"fmt"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Node layers, in the order they are checked.
const (
	LayerHost      = "host (driver and devices)"
	LayerGPUDirect = "GPUDirect RDMA"
	LayerPorts     = "ports and addresses"
	LayerTopology  = "topology"
)

// NodeOptions are what the node checks need beyond the topology.
type NodeOptions struct {
	// Subject names the node in the report.
	Subject string
	// LinkLayer, when set, is the link layer every PF port should have
	// ("InfiniBand" or "Ethernet").
	LinkLayer string
	// DevInfiniband lists /dev/infiniband on the host (nil: not read).
	DevInfiniband []string
	// MaxLevel is the worst level that counts as aligned (P2C: where NCCL's
	// defaults use GPUDirect RDMA).
	MaxLevel topology.Level
	// KeepGoing checks every layer even after one failed (acceptance runs).
	KeepGoing bool
}

// Node runs the host checklist on a topology read from sysfs.
func Node(t *topology.Topology, o NodeOptions) Report {
	if o.MaxLevel == 0 {
		o.MaxLevel = config.DefaultLevel()
	}
	o.MaxLevel = t.ShownLevel(o.MaxLevel)
	b := newBuilder(o.Subject)
	b.keepGoing = o.KeepGoing
	g := topology.GPUDirect{}
	if t.GPUDirect != nil {
		g = *t.GPUDirect
	}
	m := t.Matrix()
	var pfs []topology.NIC
	for _, n := range t.NICs {
		if n.PhysFn == "" {
			pfs = append(pfs, n)
		}
	}
	if b.startLayer(LayerHost) {
		nodeHost(b, t, g, pfs, o)
	}
	if b.startLayer(LayerGPUDirect) {
		nodeGPUDirect(b, t, m, g, o)
	}
	if b.startLayer(LayerPorts) {
		nodePorts(b, pfs, o)
	}
	if b.startLayer(LayerTopology) {
		nodeTopology(b, t, o)
	}
	return b.report()
}

// nodeHost checks the host layer: GPUs present, RDMA verbs devices.
func nodeHost(b *builder, t *topology.Topology, g topology.GPUDirect, pfs []topology.NIC, o NodeOptions) {
	if len(t.GPUs) == 0 {
		b.fail("GPUs", "no NVIDIA GPU among the PCI devices", "check that the GPUs are seated and powered (lspci -d 10de:) and that the BIOS enumerates them")
	} else {
		b.pass("GPUs", fmt.Sprintf("%d NVIDIA GPUs", len(t.GPUs)))
	}
	switch g.NVIDIAModule {
	case topology.ModuleAbsent:
		b.fail("nvidia kernel module", "not loaded", "install the NVIDIA driver on the host, or let the GPU Operator's driver container load it (ClusterPolicy driver.enabled: true)")
	case topology.Unknown:
		b.unknown("nvidia kernel module", "the module list (/sys/module) could not be read", "")
	default:
		b.pass("nvidia kernel module", "loaded ("+g.NVIDIAModule+" flavour)")
	}
	switch {
	case len(pfs) == 0 && len(g.RDMADrivers) > 0:
		b.fail("RDMA devices", "none in /sys/class/infiniband, though "+strings.Join(g.RDMADrivers, ", ")+" is loaded: no RDMA-capable NIC is visible to this host",
			"check lspci -d 15b3: (Mellanox/NVIDIA); in a VM the NIC or its VF must be passed through")
	case len(pfs) == 0:
		b.fail("RDMA devices", "none in /sys/class/infiniband", "load the NIC's RDMA driver (modprobe mlx5_ib), or deploy the Network Operator's driver (NicClusterPolicy spec.ofedDriver)")
	default:
		var names []string
		for _, n := range pfs {
			names = append(names, n.Name)
		}
		b.pass("RDMA devices", fmt.Sprintf("%d: %s", len(pfs), strings.Join(names, ", ")))
	}
	verbs(b, g, pfs, o.DevInfiniband)
}

// nodeGPUDirect checks what GPUDirect RDMA needs of the host: a peer
// memory path (nvidia-peermem or dma-buf), no ACS redirect on close paths,
// and the IOMMU.
func nodeGPUDirect(b *builder, t *topology.Topology, m *topology.Matrix, g topology.GPUDirect, o NodeOptions) {
	dmaBuf, dmaWhy := g.DMABuf()
	switch {
	case g.PeerMem == topology.PeerMemLoaded:
		b.pass("nvidia-peermem", "loaded")
	case dmaBuf == topology.Yes:
		b.pass("nvidia-peermem or dma-buf", "nvidia-peermem not loaded; dma-buf usable (open kernel module, kernel "+g.KernelRelease+")")
	case g.HostBlock() != "":
		b.fail("nvidia-peermem or dma-buf", "nvidia-peermem not loaded, and dma-buf not usable: "+dmaWhy,
			"modprobe nvidia-peermem (GPU Operator: driver.rdma.enabled=true, plus driver.rdma.useHostMofed=true when MOFED is installed on the host), or use the open kernel module on Linux 5.12+ for dma-buf (driver.kernelModuleType=open)")
	default:
		b.unknown("nvidia-peermem or dma-buf", fmt.Sprintf("nvidia-peermem %s, nvidia module %s, kernel %s", topology.Show(g.PeerMem), topology.Show(g.NVIDIAModule), topology.Show(g.KernelRelease)),
			"run doctor on the host itself (it reads /sys/module and the running kernel)")
	}
	acs(b, t, m, o.MaxLevel)
	switch g.IOMMU {
	case topology.IOMMUOff, topology.IOMMUPassthru:
		b.pass("IOMMU", g.IOMMU)
	case topology.IOMMUXlate:
		b.warn("IOMMU", "translating DMA for the GPUs: GPUDirect RDMA may fail or slow down",
			"boot with iommu=pt (with intel_iommu=on or amd_iommu=on), or turn the IOMMU off in the BIOS where SR-IOV does not need it")
	default:
		b.unknown("IOMMU", "no /sys/class/iommu to read", "")
	}
}

// nodePorts checks every port of every RDMA PF.
func nodePorts(b *builder, pfs []topology.NIC, o NodeOptions) {
	if len(pfs) == 0 {
		b.info("ports", "no RDMA device to check")
	}
	for _, n := range pfs {
		for _, p := range n.Ports {
			port(b, n, p, o.LinkLayer)
		}
	}
}

// nodeTopology checks each GPU's nearest NIC that is up against the level,
// and says NCCL's path to it and whether NCCL's defaults use GPUDirect
// RDMA there (docs/levels.md, "Aligned: NCCL's rule").
func nodeTopology(b *builder, t *topology.Topology, o NodeOptions) {
	align, paths := t.AlignLevelsAndPaths()
	for i, gpu := range t.GPUs {
		best, bestLevel := -1, topology.LevelSYS+1
		for j, n := range t.NICs {
			if n.PhysFn != "" || !n.Up() {
				continue
			}
			if l := align[i][j]; l < bestLevel {
				best, bestLevel = j, l
			}
		}
		name := fmt.Sprintf("GPU %d (%s)", gpu.Index, gpu.PCI.Address)
		if best < 0 {
			b.warn(name, "no NIC that is up", "RDMA pods cannot use this GPU with GPUDirect RDMA; nicaffinity keeps them off it")
			continue
		}
		gdr := "not used"
		if (topology.NCCLRule{}).Eligible(paths[i][best]) {
			gdr = "used"
		}
		what := fmt.Sprintf("nearest NIC %s at %s; NCCL path %s, GPUDirect RDMA %s under NCCL's defaults", t.NICs[best].Name, bestLevel, paths[i][best], gdr)
		if bestLevel > o.MaxLevel {
			b.warn(name, what, fmt.Sprintf("no NIC at %s or closer: RDMA pods on this GPU run without GPUDirect RDMA; nicaffinity keeps them off it (compare nvidia-smi topo -m)", o.MaxLevel))
			continue
		}
		b.pass(name, what)
	}
}

func verbs(b *builder, g topology.GPUDirect, pfs []topology.NIC, dev []string) {
	if len(pfs) == 0 {
		return
	}
	if g.UVerbs != topology.Yes {
		if dev == nil {
			b.unknown("verbs devices (/dev/infiniband)", "neither /sys/class/infiniband_verbs nor /dev/infiniband could be read", "")
		} else if len(dev) == 0 {
			b.fail("verbs devices (/dev/infiniband)", "/dev/infiniband is empty", "modprobe ib_uverbs (the Network Operator's driver container loads it)")
		}
		return
	}
	var missing []string
	for _, n := range pfs {
		if n.UVerbs == topology.No {
			missing = append(missing, n.Name)
		}
	}
	if len(missing) > 0 {
		b.fail("verbs devices (/dev/infiniband)", "no uverbs device for "+strings.Join(missing, ", "),
			"modprobe ib_uverbs (the Network Operator's driver container loads it); without /dev/infiniband/uverbs* no process can open the NIC")
		return
	}
	b.pass("verbs devices (/dev/infiniband)", fmt.Sprintf("one per RDMA device (%d)", len(pfs)))
}

// acs checks every GPU-NIC pair at the aligned level or closer: those are
// the paths where ACS turns peer-to-peer traffic back to the root complex.
func acs(b *builder, t *topology.Topology, m *topology.Matrix, maxLevel topology.Level) {
	redirect, unknown := map[string][]string{}, map[string]bool{}
	var order []string
	pairs := 0
	for i, g := range t.GPUs {
		for j, n := range t.NICs {
			if n.PhysFn != "" || m.Cells[i][len(t.GPUs)+j].Level > maxLevel {
				continue
			}
			pairs++
			r, u := t.ACSOnPath(g.PCI, n.PCI)
			for _, a := range r {
				if _, seen := redirect[a]; !seen {
					order = append(order, a)
				}
				redirect[a] = append(redirect[a], fmt.Sprintf("GPU %d-%s", g.Index, n.Name))
			}
			for _, a := range u {
				unknown[a] = true
			}
		}
	}
	switch {
	case pairs == 0:
		b.info("ACS on GPU-NIC paths", fmt.Sprintf("no GPU-NIC pair at %s or closer", maxLevel))
	case len(redirect) > 0:
		var parts []string
		var fixes []string
		for _, a := range order {
			parts = append(parts, fmt.Sprintf("ACS redirect on %s (%s)", a, strings.Join(redirect[a], ", ")))
			fixes = append(fixes, "setpci -s "+a+" ECAP_ACS+0x6.w=0000")
		}
		b.fail("ACS on GPU-NIC paths", strings.Join(parts, "; "),
			strings.Join(fixes, "; ")+" (until reboot); for good, turn off PCIe ACS in the BIOS or boot with pci=disable_acs_redir="+strings.Join(order, ";"))
	case len(unknown) > 0:
		b.unknown("ACS on GPU-NIC paths", fmt.Sprintf("config space of %d bridges unreadable", len(unknown)), "run as root: reading PCIe extended config space needs CAP_SYS_ADMIN")
	default:
		b.pass("ACS on GPU-NIC paths", fmt.Sprintf("no redirect on the %d pairs at %s or closer", pairs, maxLevel))
	}
}

func port(b *builder, n topology.NIC, p topology.Port, wantLinkLayer string) {
	name := fmt.Sprintf("%s port %d", n.Name, p.Number)
	netdev := "its netdev"
	if len(n.Netdevs) > 0 {
		netdev = n.Netdevs[0]
	}
	switch {
	case p.State == "ACTIVE":
	case p.State == "INIT" || p.State == "ARMED":
		b.fail(name, fmt.Sprintf("%s, physical %s: the link is up but no subnet manager has configured the port", p.State, topology.Show(p.PhysState)),
			"start a subnet manager on the fabric (opensm, or the switch's), then check ibstat "+n.Name)
		return
	case p.State == "":
		b.unknown(name, "port state not readable", "")
		return
	default:
		b.fail(name, fmt.Sprintf("%s, physical %s", p.State, topology.Show(p.PhysState)),
			"check the cable and the switch port (ibstat "+n.Name+"); a port disabled by software comes back with ip link set "+netdev+" up or the switch's port enable")
		return
	}
	detail := fmt.Sprintf("ACTIVE, %s, %s", topology.Show(p.LinkLayer), p.Rate)
	if p.MTU > 0 {
		detail += fmt.Sprintf(", MTU %d", p.MTU)
	}
	if wantLinkLayer != "" && p.LinkLayer != wantLinkLayer {
		setting := map[string]string{"InfiniBand": "1", "Ethernet": "2"}[wantLinkLayer]
		b.fail(name, fmt.Sprintf("link layer %s, want %s", topology.Show(p.LinkLayer), wantLinkLayer),
			fmt.Sprintf("mlxconfig -d %s set LINK_TYPE_P%d=%s, then reset the NIC (mlxfwreset) or reboot", n.PCI.Address, p.Number, setting))
		return
	}
	if p.LinkLayer == "Ethernet" {
		switch p.RoCEv2 {
		case topology.No:
			b.fail(name, detail+"; no RoCE v2 GID", "give "+netdev+" an IP address (the kernel adds a RoCE v2 GID per address), then check show_gids "+n.Name)
			return
		case topology.Unknown:
			b.unknown(name, detail+"; RoCE v2 GID not readable", "")
			return
		}
		detail += ", RoCE v2 GID present"
		if p.MTU > 0 && p.MTU < 4200 {
			b.warn(name, detail, fmt.Sprintf("MTU %d caps RoCE at 1024-byte messages; set MTU 9000 on %s (NicClusterPolicy or SriovNetworkNodePolicy mtu)", p.MTU, netdev))
			return
		}
	}
	b.pass(name, detail)
}
