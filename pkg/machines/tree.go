package machines

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

// Common vendor and device IDs for fixtures.
const (
	VendorNVIDIA   = 0x10de
	VendorMellanox = 0x15b3
	VendorBroadcom = 0x1000
	VendorIntel    = 0x8086
	VendorPLX      = 0x10b5

	ClassBridge = 0x060400
	Class3D     = 0x030200
	ClassEther  = 0x020000
	ClassIB     = 0x020700
	// ClassDMA is what ConnectX-8's Data Direct function reports (0x0801:
	// a DMA controller), as the bundled GB300 dump shows.
	ClassDMA = 0x080100
	// DeviceDataDirect is ConnectX-8's Data Direct function.
	DeviceDataDirect = 0x2100
)

// Tree is a sysfs tree: on disk under Root (New), or in memory (InMemory,
// Root empty). Tests that change a tree under a running reader use a tree
// on disk; the catalogue reads its shapes from trees in memory.
type Tree struct {
	Root string
	err  error
	mem  *memFS
}

// New starts an empty tree in dir (usually t.TempDir()).
func New(dir string) *Tree { return &Tree{Root: dir} }

// InMemory starts an empty tree in memory.
func InMemory() *Tree { return &Tree{mem: newMemFS()} }

// Err is the first error any call hit.
func (t *Tree) Err() error { return t.err }

// Fail records err as the tree's error, as the tree's own writers do (the
// first error wins; Err reports it): builders of other packages report
// through it.
func (t *Tree) Fail(err error) { t.fail(err) }

func (t *Tree) fail(err error) {
	if t.err == nil && err != nil {
		t.err = err
	}
}

// WriteFile writes a file below the root, creating its directory.
func (t *Tree) WriteFile(rel, content string) { t.WriteBytes(rel, []byte(content+"\n")) }

// WriteBytes writes a binary file below the root (a config space).
func (t *Tree) WriteBytes(rel string, content []byte) {
	if t.mem != nil {
		t.fail(t.mem.writeFile(path.Clean(rel), content))
		return
	}
	p := filepath.Join(t.Root, rel)
	t.fail(os.MkdirAll(filepath.Dir(p), 0o755))
	t.fail(os.WriteFile(p, content, 0o644))
}

// Symlink makes rel a relative symlink to target (both below the root).
func (t *Tree) Symlink(rel, target string) {
	r, err := filepath.Rel(path.Dir(path.Clean(rel)), path.Clean(target))
	t.fail(err)
	if t.mem != nil {
		t.fail(t.mem.symlink(r, path.Clean(rel)))
		return
	}
	p := filepath.Join(t.Root, rel)
	t.fail(os.MkdirAll(filepath.Dir(p), 0o755))
	_ = os.Remove(p)
	t.fail(os.Symlink(r, p))
}

// MkdirAll makes a directory below the root, and its parents.
func (t *Tree) MkdirAll(rel string) {
	if t.mem != nil {
		_, err := t.mem.mkdirAll(path.Clean(rel))
		t.fail(err)
		return
	}
	t.fail(os.MkdirAll(filepath.Join(t.Root, rel), 0o755))
}

// RemoveAll removes rel and what is below it (a link, not its target).
func (t *Tree) RemoveAll(rel string) {
	if t.mem != nil {
		t.fail(t.mem.removeAll(path.Clean(rel)))
		return
	}
	t.fail(os.RemoveAll(filepath.Join(t.Root, rel)))
}

// files is the tree as an fs.FS, links followed: what its own helpers
// read it through.
func (t *Tree) files() fs.FS {
	if t.mem != nil {
		return t.mem
	}
	return os.DirFS(t.Root)
}

// resolve is rel with every link followed, below the root.
func (t *Tree) resolve(rel string) (string, error) {
	if t.mem != nil {
		_, at, err := t.mem.lookup(path.Clean(rel), true)
		return at, err
	}
	real, err := filepath.EvalSymlinks(filepath.Join(t.Root, rel))
	if err != nil {
		return "", err
	}
	root, err := filepath.EvalSymlinks(t.Root)
	if err != nil {
		return "", err
	}
	r, err := filepath.Rel(root, real)
	return filepath.ToSlash(r), err
}

// NUMANode writes /sys/devices/system/node/node<id>/cpulist.
func (t *Tree) NUMANode(id int, cpus string) {
	t.WriteFile(fmt.Sprintf("devices/system/node/node%d/cpulist", id), cpus)
}

// NUMAMemory writes a NUMA node's meminfo (MemTotal in kB) and its huge
// pages (count per page size in kB).
func (t *Tree) NUMAMemory(id int, memTotalKB int64, hugePages map[int64]int64) {
	t.WriteFile(fmt.Sprintf("devices/system/node/node%d/meminfo", id),
		fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB\n", id, memTotalKB, id, memTotalKB/2))
	for kb, n := range hugePages {
		t.WriteFile(fmt.Sprintf("devices/system/node/node%d/hugepages/hugepages-%dkB/nr_hugepages", id, kb), fmt.Sprint(n))
	}
}

// NUMADistances writes /sys/devices/system/node/node<id>/distance.
func (t *Tree) NUMADistances(id int, distances ...int) {
	var parts []string
	for _, d := range distances {
		parts = append(parts, fmt.Sprint(d))
	}
	t.WriteFile(fmt.Sprintf("devices/system/node/node%d/distance", id), strings.Join(parts, " "))
}

// Func describes one PCI function.
type Func struct {
	Vendor, Device uint16
	Class          uint32
	NUMA           int
	LocalCPUs      string
}

// PCI creates a function at path ("pci0000:15/0000:15:01.0/0000:16:00.0": the
// root complex, then every bridge, then the function), with its
// /sys/bus/pci/devices link. Bridges on the path that do not exist yet are
// created as generic bridges with the function's NUMA node: call Bridge first
// for a bridge of a particular make.
func (t *Tree) PCI(path string, f Func) {
	parts := strings.Split(path, "/")
	for i := 1; i < len(parts)-1; i++ {
		bp := strings.Join(parts[:i+1], "/")
		if _, err := fs.Stat(t.files(), "devices/"+bp); err == nil {
			continue
		}
		vendor, device := uint16(VendorPLX), uint16(0x8796)
		if i == 1 {
			vendor, device = VendorIntel, 0x347a // root port
		}
		t.PCI(bp, Func{Vendor: vendor, Device: device, Class: ClassBridge, NUMA: f.NUMA})
	}
	dir := "devices/" + path
	t.WriteFile(dir+"/vendor", fmt.Sprintf("0x%04x", f.Vendor))
	t.WriteFile(dir+"/device", fmt.Sprintf("0x%04x", f.Device))
	t.WriteFile(dir+"/class", fmt.Sprintf("0x%06x", f.Class))
	t.WriteFile(dir+"/numa_node", fmt.Sprint(f.NUMA))
	if f.LocalCPUs != "" {
		t.WriteFile(dir+"/local_cpulist", f.LocalCPUs)
	}
	t.Symlink("bus/pci/devices/"+parts[len(parts)-1], dir)
}

// Bridge creates a bridge of a given make at path.
func (t *Tree) Bridge(path string, vendor, device uint16, numa int) {
	t.PCI(path, Func{Vendor: vendor, Device: device, Class: ClassBridge, NUMA: numa})
}

// GPU creates an NVIDIA 3D controller at path.
func (t *Tree) GPU(path string, numa int, cpus string) {
	t.PCI(path, Func{Vendor: VendorNVIDIA, Device: 0x2330, Class: Class3D, NUMA: numa, LocalCPUs: cpus})
}

// Port describes one RDMA port.
type Port struct {
	LinkLayer, State, Rate string
}

// ActiveIB is an active 400 Gb/s InfiniBand port; ActiveRoCE its Ethernet twin.
var (
	ActiveIB   = Port{LinkLayer: "InfiniBand", State: "4: ACTIVE", Rate: "400 Gb/sec (4X NDR)"}
	ActiveRoCE = Port{LinkLayer: "Ethernet", State: "4: ACTIVE", Rate: "200 Gb/sec (4X HDR)"}
)

// NIC creates a Mellanox function at path and the RDMA device name for it,
// with one netdev and the given ports (ActiveIB when none).
func (t *Tree) NIC(path, name string, numa int, ports ...Port) {
	if len(ports) == 0 {
		ports = []Port{ActiveIB}
	}
	class := uint32(ClassIB)
	if ports[0].LinkLayer == "Ethernet" {
		class = ClassEther
	}
	t.PCI(path, Func{Vendor: VendorMellanox, Device: 0x1021, Class: class, NUMA: numa})
	t.RDMA(path, name, "net-"+name, ports...)
}

// RDMA registers an RDMA device for the function at path.
func (t *Tree) RDMA(path, name, netdev string, ports ...Port) {
	dev := "devices/" + path
	ib := dev + "/infiniband/" + name
	t.Symlink(ib+"/device", dev)
	for i, p := range ports {
		pd := fmt.Sprintf("%s/ports/%d", ib, i+1)
		t.WriteFile(pd+"/link_layer", p.LinkLayer)
		t.WriteFile(pd+"/state", p.State)
		t.WriteFile(pd+"/rate", p.Rate)
	}
	if netdev != "" {
		t.MkdirAll(dev + "/net/" + netdev)
	}
	t.Symlink("class/infiniband/"+name, ib)
}

// SRIOV marks pf as an SR-IOV PF with total VFs and links the enabled VFs (by path) both ways.
func (t *Tree) SRIOV(pfPath string, total int, vfPaths ...string) {
	t.WriteFile("devices/"+pfPath+"/sriov_totalvfs", fmt.Sprint(total))
	for i, vf := range vfPaths {
		t.Symlink(fmt.Sprintf("devices/%s/virtfn%d", pfPath, i), "devices/"+vf)
		t.Symlink("devices/"+vf+"/physfn", "devices/"+pfPath)
	}
}

// NVIDIAProcDir is where a tree keeps its NVIDIA driver procfs
// (/proc/driver/nvidia on a host), below its root: no real sysfs has it.
const NVIDIAProcDir = ".proc-driver-nvidia"

// NUMAStatus writes the NVIDIA driver's numa_status for the GPU at addr: its
// memory is NUMA node node, as on coherent C2C systems.
func (t *Tree) NUMAStatus(addr string, node int) {
	t.WriteFile(NVIDIAProcDir+"/gpus/"+addr+"/numa_status", fmt.Sprintf("Node:      %d\nStatus:    online\n", node))
}

// Reader is the sysfs reader of the tree, its NVIDIA procfs included.
func (t *Tree) Reader() *sysfs.Reader {
	if t.mem != nil {
		return sysfs.New(sysfs.WithFS(t.mem), sysfs.WithNVIDIAProc(NVIDIAProcDir))
	}
	return sysfs.New(sysfs.WithRoot(t.Root), sysfs.WithNVIDIAProc(filepath.Join(t.Root, NVIDIAProcDir)))
}

// Discover builds a machine's tree under dir (in memory when dir is "")
// and reads it back with the sysfs reader: the machine's topology as
// discovery would see it.
func Discover(dir string, build func(*Tree)) (*topology.Topology, error) {
	t := New(dir)
	if dir == "" {
		t = InMemory()
	}
	build(t)
	if err := t.Err(); err != nil {
		return nil, err
	}
	return t.Reader().Discover()
}

// Module marks a kernel module loaded (/sys/module/<name>), with its taint
// letters when taint is not empty ("POE" for the proprietary nvidia module,
// "OE" for the open one).
func (t *Tree) Module(name, taint string) {
	t.MkdirAll("module/" + name)
	if taint != "" {
		t.WriteFile("module/"+name+"/taint", taint)
	}
}

// RemoveModule unloads a module from the tree.
func (t *Tree) RemoveModule(name string) {
	t.RemoveAll("module/" + name)
}

// IOMMU registers IOMMU units (dmar0, ...); none leaves /sys/class/iommu
// empty, which reads as IOMMU off. domain is the type every GPU's group
// gets ("identity", "DMA-FQ"); empty writes none.
func (t *Tree) IOMMU(domain string, units ...string) {
	t.MkdirAll("class/iommu")
	for _, u := range units {
		t.MkdirAll("class/iommu/" + u)
	}
	if domain == "" {
		return
	}
	for _, dev := range t.functions() {
		if dev.vendor == VendorNVIDIA && dev.class&0xffff00 == 0x030200 {
			t.WriteFile(dev.path+"/iommu_group/type", domain)
		}
	}
}

// ACS writes a config space with an ACS capability whose control register
// is ctrl on the bridge at address (0000:12:00.0).
func (t *Tree) ACS(address string, ctrl uint16) {
	for _, dev := range t.functions() {
		if filepath.Base(dev.path) == address {
			t.WriteBytes(dev.path+"/config", topology.ACSConfig(ctrl))
			return
		}
	}
	t.fail(fmt.Errorf("ACS: no PCI device %s in the tree", address))
}

// ACSAll writes ctrl as the ACS control of every bridge.
func (t *Tree) ACSAll(ctrl uint16) {
	for _, dev := range t.functions() {
		if dev.class == ClassBridge {
			t.WriteBytes(dev.path+"/config", topology.ACSConfig(ctrl))
		}
	}
}

// BridgeAbove is the address of the bridge right above the PCI device at
// address: the downstream port a GPU or NIC hangs from.
func (t *Tree) BridgeAbove(address string) string {
	for _, dev := range t.functions() {
		if filepath.Base(dev.path) == address {
			return filepath.Base(filepath.Dir(dev.path))
		}
	}
	t.fail(fmt.Errorf("BridgeAbove: no PCI device %s in the tree", address))
	return ""
}

// GPUAddresses are the NVIDIA GPUs of the tree in PCI order (GPU index order
// without NVML).
func (t *Tree) GPUAddresses() []string {
	var out []string
	for _, dev := range t.functions() {
		if dev.vendor == VendorNVIDIA && dev.class&0xffff00 == 0x030200 {
			out = append(out, filepath.Base(dev.path))
		}
	}
	sort.Strings(out)
	return out
}

type function struct {
	path   string // below the root, "devices/pci0000:10/..."
	vendor uint16
	class  uint32
}

// functions lists the tree's PCI functions through /sys/bus/pci/devices.
func (t *Tree) functions() []function {
	links, err := fs.Glob(t.files(), "bus/pci/devices/*")
	t.fail(err)
	var out []function
	for _, l := range links {
		real, err := t.resolve(l)
		if err != nil {
			t.fail(err)
			continue
		}
		f := function{path: real}
		var v, c uint64
		if b, err := fs.ReadFile(t.files(), real+"/vendor"); err == nil {
			v, _ = strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 16)
		}
		if b, err := fs.ReadFile(t.files(), real+"/class"); err == nil {
			c, _ = strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
		}
		f.vendor, f.class = uint16(v), uint32(c)
		out = append(out, f)
	}
	return out
}

// Verbs registers the verbs device of an RDMA device
// (/sys/class/infiniband_verbs/<uverbs>/ibdev).
func (t *Tree) Verbs(rdma, uverbs string) {
	t.WriteFile("class/infiniband_verbs/"+uverbs+"/ibdev", rdma)
}

// GID writes entry index of an RDMA port's GID table: the GID and its type
// ("RoCE v2", "IB/RoCE v1").
func (t *Tree) GID(rdma string, port, index int, gid, typ string) {
	dir := fmt.Sprintf("class/infiniband/%s/ports/%d", rdma, port)
	t.WriteFile(fmt.Sprintf("%s/gids/%d", dir, index), gid)
	t.WriteFile(fmt.Sprintf("%s/gid_attrs/types/%d", dir, index), typ)
}

// SetPort rewrites one attribute of an RDMA port (state "1: DOWN",
// phys_state "3: Disabled", link_layer "Ethernet").
func (t *Tree) SetPort(rdma string, port int, attr, value string) {
	t.WriteFile(fmt.Sprintf("class/infiniband/%s/ports/%d/%s", rdma, port, attr), value)
}

// RDMANames lists the tree's RDMA devices.
func (t *Tree) RDMANames() []string {
	entries, err := fs.ReadDir(t.files(), "class/infiniband")
	t.fail(err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// GPUDirectReady makes a built machine's tree one where GPUDirect RDMA can
// run: the open nvidia module and nvidia-peermem loaded, ib_uverbs with a
// verbs device per RDMA device, IOMMU off, no ACS redirect, every port's
// physical link up with an MTU, and a RoCE v2 GID on every Ethernet port.
func (t *Tree) GPUDirectReady() {
	t.Module("nvidia", "OE")
	t.Module("nvidia_peermem", "OE")
	t.Module("ib_uverbs", "")
	t.Module("mlx5_core", "")
	t.Module("mlx5_ib", "")
	t.IOMMU("")
	t.ACSAll(0)
	for i, name := range t.RDMANames() {
		t.Verbs(name, fmt.Sprintf("uverbs%d", i))
		ports, err := fs.Glob(t.files(), "class/infiniband/"+name+"/ports/*")
		t.fail(err)
		for _, p := range ports {
			n, _ := strconv.Atoi(path.Base(p))
			t.SetPort(name, n, "phys_state", "5: LinkUp")
			ll, _ := fs.ReadFile(t.files(), p+"/link_layer")
			mtu := "4092"
			if strings.TrimSpace(string(ll)) == "Ethernet" {
				mtu = "9000"
				t.GID(name, n, 0, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "IB/RoCE v1")
				t.GID(name, n, 1, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "RoCE v2")
			}
			nets, _ := fs.Glob(t.files(), "class/infiniband/"+name+"/device/net/*")
			for _, nd := range nets {
				t.WriteFile(nd+"/mtu", mtu)
			}
		}
	}
}

// VPD writes a function's VPD with the unique ID a ConnectX NIC and its
// Data Direct function share (the "VU" keyword).
func (t *Tree) VPD(path, unique string) {
	t.WriteBytes("devices/"+path+"/vpd", topology.BuildVPD("NVIDIA ConnectX-8", topology.VPDUniqueKeyword, unique))
}
