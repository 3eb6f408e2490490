package machines

import (
	"fmt"
	"strings"
)

// Machine is a sysfs tree with the shape of a real machine whose
// `nvidia-smi topo -m` was published (the file in
// pkg/topology/testdata/nvidia-smi-topo named by Published). NVLinks is the NV# its GPU pairs show.
type Machine struct {
	Name      string
	Published string
	GPUs      int
	NVLinks   int
	Build     func(t *Tree)
}

// Machines are the published shapes the tests pin the level rule against.
var Machines = []Machine{
	{Name: "hgx-h100-8gpu-8nic", Published: "hgx-h100-8gpu-8nic_sglang-issue-30401.txt", GPUs: 8, NVLinks: 18, Build: HGXH100},
	{Name: "h20-3e-8gpu-11nic", Published: "h20-3e-8gpu-11nic_sglang-issue-28893.txt", GPUs: 8, NVLinks: 18, Build: H20},
	{Name: "hgx-h100-8gpu-13nic-ib-eth", Published: "hgx-h100-8gpu-13nic-ib-eth_szymonozog-blog-penny-1.txt", GPUs: 8, NVLinks: 18, Build: HGXH100IBEth},
	{Name: "dgx-a100-8gpu-10nic", Published: "dgx-a100-8gpu-10nic_unresolved-github-file.txt", GPUs: 8, NVLinks: 12, Build: DGXA100},
	{Name: "dgx-h100-class-8gpu-12nic-numa-off", Published: "dgx-h100-class-8gpu-12nic-numa-off_unresolved-github-file.txt", GPUs: 8, NVLinks: 18, Build: DGXH100NUMAOff},
}

func addr(bus int, devfn string) string { return fmt.Sprintf("0000:%02x:%s", bus, devfn) }

// chain builds a path from a root complex bus and a list of (bus, devfn) hops.
func chain(rcBus int, hops ...string) string {
	return fmt.Sprintf("pci0000:%02x/", rcBus) + strings.Join(hops, "/")
}

// bcm creates every bridge of path below the root port as a Broadcom PEX89xxx port.
func (t *Tree) bcm(path string, numa int) {
	parts := strings.Split(path, "/")
	for i := 3; i <= len(parts); i++ {
		t.Bridge(strings.Join(parts[:i], "/"), VendorBroadcom, 0xc030, numa)
	}
}

// twoSockets writes NUMA nodes 0 and 1 with their CPUs and the distance
// between them.
func (t *Tree) twoSockets(cpus []string, remote int) {
	t.NUMANode(0, cpus[0])
	t.NUMANode(1, cpus[1])
	t.NUMADistances(0, 10, remote)
	t.NUMADistances(1, remote, 10)
}

// HGXH100 is an HGX H100 board on two Sapphire Rapids sockets: every GPU has
// one NIC behind the same Broadcom PEX89xxx switch, whose virtual sub-switches
// put GPU and NIC two virtual levels apart (the OCI BM.GPU.H100.8 dump shows
// that layering), and every switch hangs off its own host bridge.
func HGXH100(t *Tree) {
	cpus := []string{"0-47,96-143", "48-95,144-191"}
	t.twoSockets(cpus, 21)
	bases := []int{0x10, 0x30, 0x50, 0x70, 0x90, 0xb0, 0xd0, 0xe0}
	for g, b := range bases {
		numa := g / 4
		top := chain(b, addr(b, "01.0"), addr(b+1, "00.0"))
		gpuSide := top + "/" + addr(b+2, "00.0") + "/" + addr(b+3, "00.0") + "/" + addr(b+4, "00.0")
		nicSide := top + "/" + addr(b+2, "01.0") + "/" + addr(b+6, "00.0") + "/" + addr(b+7, "00.0")
		t.bcm(gpuSide, numa)
		t.bcm(nicSide, numa)
		t.GPU(gpuSide+"/"+addr(b+5, "00.0"), numa, cpus[numa])
		t.NIC(nicSide+"/"+addr(b+8, "00.0"), fmt.Sprintf("mlx5_%d", g), numa)
	}
}

// H20 is an 8x H20-3e board: pairs of GPUs share a switch with two NICs (the
// last pair with three), and two more RDMA devices (mlx5_11 and a RoCE bond)
// hang off host bridges of their own on socket 1.
func H20(t *Tree) {
	cpus := []string{"0-47,96-143", "48-95,144-191"}
	t.NUMANode(0, cpus[0])
	t.NUMANode(1, cpus[1])
	nics := [][]string{{"mlx5_0", "mlx5_1"}, {"mlx5_2", "mlx5_3"}, {"mlx5_4", "mlx5_5"}, {"mlx5_6", "mlx5_7", "mlx5_8"}}
	for k, b := range []int{0x10, 0x30, 0x90, 0xb0} {
		numa := k / 2
		sw := chain(b, addr(b, "01.0"), addr(b+1, "00.0"))
		for i := 0; i < 2; i++ {
			t.GPU(fmt.Sprintf("%s/%s/%s", sw, addr(b+2, fmt.Sprintf("%02x.0", i)), addr(b+3+i, "00.0")), numa, cpus[numa])
		}
		for i, name := range nics[k] {
			t.NIC(fmt.Sprintf("%s/%s/%s", sw, addr(b+2, fmt.Sprintf("%02x.0", 8+i)), addr(b+8+i, "00.0")), name, 1-1+numa, ActiveRoCE)
		}
	}
	t.NIC(chain(0xd0, addr(0xd0, "01.0"), addr(0xd1, "00.0")), "mlx5_11", 1, ActiveRoCE)
	t.NIC(chain(0xe0, addr(0xe0, "01.0"), addr(0xe1, "00.0")), "mlx5_bond_0", 1, ActiveRoCE)
}

// HGXH100IBEth is an HGX H100 whose GPU pairs sit under one switch with two
// sub-switches, each holding one GPU and one IB HCA (PIX to its own GPU, PXB to
// the neighbour's), plus five Ethernet RDMA functions behind one switch of
// their own on socket 1.
func HGXH100IBEth(t *Tree) {
	cpus := []string{"0-55,112-167", "56-111,168-223"}
	t.NUMANode(0, cpus[0])
	t.NUMANode(1, cpus[1])
	for k, b := range []int{0x10, 0x30, 0x90, 0xb0} {
		numa := k / 2
		top := chain(b, addr(b, "01.0"), addr(b+1, "00.0"))
		for i := 0; i < 2; i++ {
			sub := fmt.Sprintf("%s/%s/%s", top, addr(b+2, fmt.Sprintf("%02x.0", i)), addr(b+3+8*i, "00.0"))
			t.GPU(fmt.Sprintf("%s/%s/%s", sub, addr(b+4+8*i, "00.0"), addr(b+5+8*i, "00.0")), numa, cpus[numa])
			t.NIC(fmt.Sprintf("%s/%s/%s", sub, addr(b+4+8*i, "01.0"), addr(b+6+8*i, "00.0")), fmt.Sprintf("mlx5_ib%d", 2*k+i), numa)
		}
	}
	sw := chain(0xd0, addr(0xd0, "01.0"), addr(0xd1, "00.0"))
	for i := 0; i < 5; i++ {
		t.NIC(fmt.Sprintf("%s/%s/%s", sw, addr(0xd2, fmt.Sprintf("%02x.0", i)), addr(0xd3+i, "00.0")), fmt.Sprintf("mlx5_eth%d", i), 1, ActiveRoCE)
	}
}

// DGXA100 is a DGX A100 (two EPYC Rome sockets in NPS4: eight NUMA nodes).
// Each GPU pair sits under a PEX88096 with two sub-switches; inside each
// sub-switch the NIC hangs one level up from the GPU (the HGX A100 dump in
// SimAI shows the same nesting), so GPU-NIC is PXB even in the same
// sub-switch. The dual-port storage HCA is two functions of one device.
func DGXA100(t *Tree) {
	numaCPUs := func(n int) string { return fmt.Sprintf("%d-%d,%d-%d", 16*n, 16*n+15, 128+16*n, 128+16*n+15) }
	for n := 0; n < 8; n++ {
		t.NUMANode(n, numaCPUs(n))
	}
	type pair struct{ rc, numa int }
	for p, pr := range []pair{{0x00, 3}, {0x40, 1}, {0x80, 7}, {0xb0, 5}} {
		b := pr.rc
		top := chain(b, addr(b, "01.1"), addr(b+1, "00.0"))
		for i := 0; i < 2; i++ {
			o := b + 2 + 7*i
			sub := fmt.Sprintf("%s/%s/%s", top, addr(b+1+1, fmt.Sprintf("%02x.0", 4*i)), addr(o+1, "00.0"))
			gpu := fmt.Sprintf("%s/%s/%s/%s/%s", sub, addr(o+2, "00.0"), addr(o+3, "00.0"), addr(o+4, "00.0"), addr(o+5, "00.0"))
			t.GPU(gpu, pr.numa, numaCPUs(pr.numa))
			t.NIC(fmt.Sprintf("%s/%s/%s", sub, addr(o+2, "08.0"), addr(o+6, "00.0")), fmt.Sprintf("mlx5_%d", 2*p+i), pr.numa)
		}
	}
	storage := chain(0xe0, addr(0xe0, "03.1"), addr(0xe1, "00.0"))
	t.NIC(storage, "mlx5_8", 0, ActiveRoCE)
	t.PCI(chain(0xe0, addr(0xe0, "03.1"), addr(0xe1, "00.1")), Func{Vendor: VendorMellanox, Device: 0x101b, Class: ClassEther, NUMA: 0})
	t.RDMA(chain(0xe0, addr(0xe0, "03.1"), addr(0xe1, "00.1")), "mlx5_9", "net-mlx5_9", ActiveRoCE)
}

// DGXH100NUMAOff is a DGX H100-class machine booted with numa=off: every
// device reports NUMA node 0, so pairs across sockets read NODE. Eight compute
// HCAs sit PIX to one GPU each (through the PEX89xxx virtual layering), and two
// dual-port storage HCAs hang off host bridges of their own.
func DGXH100NUMAOff(t *Tree) {
	t.NUMANode(0, "0-191")
	// NIC legend order: mlx5_0,1,2 | 3,4 storage | 5,6,7,8 | 9,10 storage | 11.
	compute := []struct {
		rc  int
		nic string
	}{{0x10, "mlx5_0"}, {0x20, "mlx5_1"}, {0x30, "mlx5_2"}, {0x50, "mlx5_5"}, {0x90, "mlx5_6"}, {0xa0, "mlx5_7"}, {0xb0, "mlx5_8"}, {0xd0, "mlx5_11"}}
	for _, c := range compute {
		b := c.rc
		top := chain(b, addr(b, "01.0"), addr(b+1, "00.0"))
		gpuSide := top + "/" + addr(b+2, "00.0") + "/" + addr(b+3, "00.0") + "/" + addr(b+4, "00.0")
		nicSide := top + "/" + addr(b+2, "01.0") + "/" + addr(b+6, "00.0") + "/" + addr(b+7, "00.0")
		t.bcm(gpuSide, 0)
		t.bcm(nicSide, 0)
		t.GPU(gpuSide+"/"+addr(b+5, "00.0"), 0, "0-191")
		t.NIC(nicSide+"/"+addr(b+8, "00.0"), c.nic, 0)
	}
	for _, s := range []struct {
		rc    int
		names [2]string
	}{{0x40, [2]string{"mlx5_3", "mlx5_4"}}, {0xc0, [2]string{"mlx5_9", "mlx5_10"}}} {
		for fn, name := range s.names {
			p := chain(s.rc, addr(s.rc, "01.0"), addr(s.rc+1, fmt.Sprintf("00.%d", fn)))
			t.NIC(p, name, 0, ActiveRoCE)
		}
	}
}

// HalfNICs is an 8-GPU node whose four PCIe switches hold two GPUs each and
// only the last two switches an RDMA NIC (mlx5_0 next to GPUs 4,5, mlx5_1 next
// to GPUs 6,7): the shape where a pod that lands on GPUs 0-3 gets no
// GPUDirect RDMA. One socket, every switch on its own root port of one host bridge.
func HalfNICs(t *Tree) {
	t.NUMANode(0, "0-63")
	for s := 0; s < 4; s++ {
		b := 0x10 + 0x10*s
		sw := chain(0, addr(0, fmt.Sprintf("%02x.0", s+1)), addr(b, "00.0"))
		for i := 0; i < 2; i++ {
			t.GPU(fmt.Sprintf("%s/%s/%s", sw, addr(b+1, fmt.Sprintf("%02x.0", i)), addr(b+2+i, "00.0")), 0, "0-63")
		}
		if s >= 2 {
			t.NIC(fmt.Sprintf("%s/%s/%s", sw, addr(b+1, "08.0"), addr(b+8, "00.0")), fmt.Sprintf("mlx5_%d", s-2), 0)
		}
	}
}

// H20SRIOV is H20 with SR-IOV enabled on two PFs: mlx5_0 (next to GPUs 0,1)
// and mlx5_6 (next to GPUs 6,7), each with two VFs (functions .2 and .3).
func H20SRIOV(t *Tree) {
	H20(t)
	for _, pf := range []struct {
		path string
		numa int
	}{
		{"pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:08.0/0000:18:00", 0},
		{"pci0000:b0/0000:b0:01.0/0000:b1:00.0/0000:b2:08.0/0000:b8:00", 1},
	} {
		var vfs []string
		for f := 2; f < 4; f++ {
			vf := fmt.Sprintf("%s.%d", pf.path, f)
			t.PCI(vf, Func{Vendor: VendorMellanox, Device: 0x101e, Class: ClassEther, NUMA: pf.numa})
			vfs = append(vfs, vf)
		}
		t.SRIOV(pf.path+".0", 8, vfs...)
	}
}

// GB200Tray is a GB200 compute tray: two Grace CPUs (NUMA nodes 0 and 1,
// 72 cores each), two GB200 GPUs per Grace, each on a Grace root port of its
// own and linked to that Grace by NVLink-C2C, with its memory managed by the
// driver as NUMA node 2, 10, 18 or 26 (what the published tray's `nvidia-smi
// topo -m` prints as GPU NUMA ID). Each Grace has two 400 Gb/s ConnectX-7 for
// the compute fabric (mlx5_0,1 and mlx5_4,5) and a dual-port 200 Gb/s
// BlueField-3 (mlx5_2,3 and mlx5_6,7, the PIX pairs of the published
// matrix), each on a Grace root port of its own. No PCIe switch joins a GPU
// and a NIC: NCCL reaches every NIC of the GPU's Grace through C2C and
// Grace's PCIe, P2C for the fastest ones (docs/levels.md).
//
// The published matrix prints SYS between NICs of one Grace, where this
// shape's separate root complexes on one NUMA node give NODE: which Grace
// each published NIC hangs off is not known, so the shape is not pinned to it.
func GB200Tray(t *Tree) {
	cpus := []string{"0-71", "72-143"}
	t.twoSockets(cpus, 40)
	grace := func(domain int) string { return fmt.Sprintf("pci%04x:00/%04x:00:00.0", domain, domain) }
	fn := func(domain int, f int) string { return fmt.Sprintf("%04x:01:00.%d", domain, f) }
	memNUMA := []int{2, 10, 18, 26}
	for s := 0; s < 2; s++ {
		base := 0x10 * s
		for i, d := range []int{base + 0x8, base + 0x9} {
			g := 2*s + i
			path := grace(d) + "/" + fn(d, 0)
			t.PCI(path, Func{Vendor: VendorNVIDIA, Device: 0x2941, Class: Class3D, NUMA: s, LocalCPUs: cpus[s]})
			t.NUMAStatus(fn(d, 0), memNUMA[g])
		}
		for i, d := range []int{base, base + 0x2} {
			t.NIC(grace(d)+"/"+fn(d, 0), fmt.Sprintf("mlx5_%d", 4*s+i), s)
		}
		bf := base + 0x6
		for f := 0; f < 2; f++ {
			path := grace(bf) + "/" + fn(bf, f)
			t.PCI(path, Func{Vendor: VendorMellanox, Device: 0xa2dc, Class: ClassEther, NUMA: s})
			name := fmt.Sprintf("mlx5_%d", 4*s+2+f)
			t.RDMA(path, name, "net-"+name, Port{LinkLayer: "Ethernet", State: "4: ACTIVE", Rate: "200 Gb/sec (4X HDR)"})
		}
	}
}

// GH200 is a GH200 node: one Grace (NUMA node 0, 72 cores) and its Hopper
// GPU, linked by NVLink-C2C, the GPU's memory managed as NUMA node 1; two
// dual-port ConnectX-7 at 200 Gb/s a port on Grace root ports (the "(4)
// 200Gbps ports each" of NVIDIA/nccl issue #1579). NCCL reaches all four
// ports at P2C; the nvidia-smi level is SYS.
func GH200(t *Tree) {
	t.NUMANode(0, "0-71")
	t.PCI("pci0009:00/0009:00:00.0/0009:01:00.0", Func{Vendor: VendorNVIDIA, Device: 0x2342, Class: Class3D, NUMA: 0, LocalCPUs: "0-71"})
	t.NUMAStatus("0009:01:00.0", 1)
	port := Port{LinkLayer: "InfiniBand", State: "4: ACTIVE", Rate: "200 Gb/sec (2X NDR)"}
	for k, d := range []int{0x0000, 0x0002} {
		for f := 0; f < 2; f++ {
			path := fmt.Sprintf("pci%04x:00/%04x:00:00.0/%04x:01:00.%d", d, d, d, f)
			t.PCI(path, Func{Vendor: VendorMellanox, Device: 0x1021, Class: ClassIB, NUMA: 0})
			name := fmt.Sprintf("mlx5_%d", 2*k+f)
			t.RDMA(path, name, "net-"+name, port)
		}
	}
}

// HGXB300 is an HGX B300 board as the bundled OCI B300 dump lays it out:
// per GPU, a Broadcom PEX89xxx with a virtual sub-switch, below it the
// ConnectX-8's own PCIe switch (0x15b3:0x197c), which holds the NIC and,
// through a second ConnectX-8 switch level, the GPU. The GPU-NIC pair is
// PXB to NCCL and to nvidia-smi alike: GPUDirect RDMA without a host
// bridge. 800 Gb/s ports; two sockets of four GPUs.
func HGXB300(t *Tree) {
	cpus := []string{"0-59,120-179", "60-119,180-239"}
	t.twoSockets(cpus, 21)
	const vendorCX8, cx8Switch = VendorMellanox, 0x197c
	port := Port{LinkLayer: "InfiniBand", State: "4: ACTIVE", Rate: "800 Gb/sec (4X XDR)"}
	for g, b := range []int{0x10, 0x20, 0x30, 0x40, 0x90, 0xa0, 0xb0, 0xc0} {
		numa := g / 4
		top := chain(b, addr(b, "01.0"), addr(b+1, "00.0"), addr(b+2, "00.0"), addr(b+3, "00.0"))
		t.bcm(top, numa)
		cx8 := top + "/" + addr(b+4, "00.0")
		t.Bridge(top+"/"+addr(b+4, "00.0"), vendorCX8, cx8Switch, numa)
		nicPort := cx8 + "/" + addr(b+5, "00.0")
		t.Bridge(nicPort, vendorCX8, cx8Switch, numa)
		gpuPort := cx8 + "/" + addr(b+5, "01.0")
		t.Bridge(gpuPort, vendorCX8, cx8Switch, numa)
		inner := gpuPort + "/" + addr(b+7, "00.0")
		t.Bridge(inner, vendorCX8, cx8Switch, numa)
		t.Bridge(inner+"/"+addr(b+8, "00.0"), vendorCX8, cx8Switch, numa)
		t.PCI(inner+"/"+addr(b+8, "00.0")+"/"+addr(b+9, "00.0"), Func{Vendor: VendorNVIDIA, Device: 0x3182, Class: Class3D, NUMA: numa, LocalCPUs: cpus[numa]})
		nic := nicPort + "/" + addr(b+6, "00.0")
		name := fmt.Sprintf("mlx5_%d", g)
		t.PCI(nic, Func{Vendor: VendorMellanox, Device: 0x1023, Class: ClassIB, NUMA: numa})
		t.RDMA(nic, name, "net-"+name, port)
	}
}

// GB300DataDirect is a GB300 compute tray with ConnectX-8 Data Direct: two
// Grace CPUs (NUMA nodes 0 and 1), two GB300 GPUs per Grace linked to it by
// NVLink-C2C (memory as NUMA nodes 2, 10, 18, 26). Each GPU hangs below a
// ConnectX-8's PCIe switch (0x15b3:0x197c) on a Grace root port, and beside
// it, on the same switch, that ConnectX-8's Data Direct function
// (0x15b3:0x2100), as the bundled GB300 dump places them (its rdma_*_dma
// devices). The ConnectX-8's own PF, which holds the RDMA device and its
// netdev, is on a Grace root port of its own: where the PF sits is not in
// the dump (NCCL lists only the Data Direct device), so that part is
// assumed. The NIC and its Data Direct function carry one VPD unique ID,
// which is how the reader ties them together.
//
// nvidia-smi measures from the PF: SYS to the GPU's own NIC, as on every
// pair of a tray whose GPU memory is a NUMA node of its own. NCCL measures
// from the Data Direct function: PXB, eligible, and each GPU's own NIC its
// only closest one (the Grace's other NIC is PHB). Without the link (VPD
// unreadable) NCCL's rule would give P2C to both NICs of the GPU's Grace.
func GB300DataDirect(t *Tree) {
	cpus := []string{"0-71", "72-143"}
	t.twoSockets(cpus, 40)
	const cx8Switch = 0x197c
	port := Port{LinkLayer: "InfiniBand", State: "4: ACTIVE", Rate: "800 Gb/sec (4X XDR)"}
	memNUMA := []int{2, 10, 18, 26}
	for g := 0; g < 4; g++ {
		s := g / 2
		d := 0x8 + 0x10*s + g%2 // the dump's 0008, 0009, 0018, 0019
		at := func(bus int, devfn string) string { return fmt.Sprintf("%04x:%02x:%s", d, bus, devfn) }
		up := fmt.Sprintf("pci%04x:00/%s/%s", d, at(0, "00.0"), at(1, "00.0"))
		t.Bridge(fmt.Sprintf("pci%04x:00/%s", d, at(0, "00.0")), VendorNVIDIA, 0x22b2, s) // Grace root port
		t.Bridge(up, VendorMellanox, cx8Switch, s)
		t.Bridge(up+"/"+at(2, "00.0"), VendorMellanox, cx8Switch, s)
		t.Bridge(up+"/"+at(2, "01.0"), VendorMellanox, cx8Switch, s)
		dd := up + "/" + at(2, "00.0") + "/" + at(3, "00.0")
		t.PCI(dd, Func{Vendor: VendorMellanox, Device: DeviceDataDirect, Class: ClassDMA, NUMA: s})
		inner := up + "/" + at(2, "01.0") + "/" + at(4, "00.0")
		t.Bridge(inner, VendorMellanox, cx8Switch, s)
		t.Bridge(inner+"/"+at(5, "00.0"), VendorMellanox, cx8Switch, s)
		gpu := inner + "/" + at(5, "00.0") + "/" + at(6, "00.0")
		t.PCI(gpu, Func{Vendor: VendorNVIDIA, Device: 0x31c2, Class: Class3D, NUMA: s, LocalCPUs: cpus[s]})
		t.NUMAStatus(at(6, "00.0"), memNUMA[g])
		// The PF on a Grace root port of its own (domains 0000-0001 and
		// 0010-0011).
		pd := 0x10*s + g%2
		pf := fmt.Sprintf("pci%04x:00/%04x:00:00.0/%04x:01:00.0", pd, pd, pd)
		name := fmt.Sprintf("mlx5_%d", g)
		t.PCI(pf, Func{Vendor: VendorMellanox, Device: 0x1023, Class: ClassIB, NUMA: s})
		t.RDMA(pf, name, "net-"+name, port)
		unique := fmt.Sprintf("MT2446XZ0DD%d", g)
		t.VPD(pf, unique)
		t.VPD(dd, unique)
	}
}
