// Package sysfstest builds sysfs trees in a directory, with real directories
// and symlinks laid out as the kernel lays them out, for tests of everything
// that reads sysfs.
package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
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
)

// Tree is a sysfs tree under Root.
type Tree struct {
	Root string
	err  error
}

// New starts an empty tree in dir (usually t.TempDir()).
func New(dir string) *Tree { return &Tree{Root: dir} }

// Err is the first error any call hit.
func (t *Tree) Err() error { return t.err }

func (t *Tree) fail(err error) {
	if t.err == nil && err != nil {
		t.err = err
	}
}

// WriteFile writes a file below the root, creating its directory.
func (t *Tree) WriteFile(rel, content string) {
	p := filepath.Join(t.Root, rel)
	t.fail(os.MkdirAll(filepath.Dir(p), 0o755))
	t.fail(os.WriteFile(p, []byte(content+"\n"), 0o644))
}

// Symlink makes rel a relative symlink to target (both below the root).
func (t *Tree) Symlink(rel, target string) {
	p := filepath.Join(t.Root, rel)
	t.fail(os.MkdirAll(filepath.Dir(p), 0o755))
	r, err := filepath.Rel(filepath.Dir(p), filepath.Join(t.Root, target))
	t.fail(err)
	_ = os.Remove(p)
	t.fail(os.Symlink(r, p))
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
		if _, err := os.Stat(filepath.Join(t.Root, "devices", bp)); err == nil {
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
		t.fail(os.MkdirAll(filepath.Join(t.Root, dev, "net", netdev), 0o755))
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

// Discover builds a machine's tree under dir and reads it back with the
// sysfs reader: the machine's topology as discovery would see it.
func Discover(dir string, build func(*Tree)) (*topology.Topology, error) {
	t := New(dir)
	build(t)
	if err := t.Err(); err != nil {
		return nil, err
	}
	return sysfs.New(sysfs.WithRoot(dir)).Discover()
}
