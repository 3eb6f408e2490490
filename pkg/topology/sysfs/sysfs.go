// Package sysfs reads a host's PCIe tree, RDMA devices and NUMA nodes from
// sysfs into topology.HostData. The root is given per Reader, so the exporter
// can read the host's /sys mounted elsewhere and tests can read a tree they built.
package sysfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Reader reads one sysfs tree.
type Reader struct {
	root   string
	kernel string
	// nvidiaProc is the NVIDIA driver's procfs directory.
	nvidiaProc string
	// files reads the tree: the os package, or an fs.FS (WithFS).
	files files
}

// Option configures a Reader.
type Option func(*Reader)

// WithRoot reads dir as if it were /sys.
func WithRoot(dir string) Option { return func(r *Reader) { r.root = dir } }

// WithKernelRelease gives the running kernel's release (uname -r), which
// sysfs does not hold: dma-buf support depends on it. Without it the fact
// stays unknown.
func WithKernelRelease(release string) Option { return func(r *Reader) { r.kernel = release } }

// WithNVIDIAProc reads the NVIDIA driver's procfs (/proc/driver/nvidia) from
// dir: a GPU's numa_status there says the driver manages its memory as a NUMA
// node, which it does on coherent C2C (Grace) systems only. A directory that
// is not there reads as no such GPU.
func WithNVIDIAProc(dir string) Option { return func(r *Reader) { r.nvidiaProc = dir } }

// WithFS reads the tree from fsys instead of the host's file system: its
// root is fsys's root, and a WithNVIDIAProc directory is a path in fsys.
// fsys must implement fs.ReadLinkFS (sysfs is made of links); the
// catalogue's machines are built in memory and read this way, so reading
// one writes nothing to disk.
func WithFS(fsys fs.FS) Option {
	return func(r *Reader) { r.files, r.root = fsFiles{fsys}, "." }
}

// New returns a Reader of /sys unless WithRoot says otherwise. The NVIDIA
// procfs is read from /proc/driver/nvidia when the root is /sys, from
// WithNVIDIAProc's directory when given, else not at all: a tree read from
// elsewhere never mixes in this host's GPUs.
func New(opts ...Option) *Reader {
	r := &Reader{root: "/sys", files: osFiles{}}
	for _, o := range opts {
		o(r)
	}
	if r.nvidiaProc == "" && r.root == "/sys" {
		r.nvidiaProc = "/proc/driver/nvidia"
	}
	return r
}

// Read reads the PCI functions, RDMA devices and NUMA nodes. Every error names
// the file or device it is about.
func (r *Reader) Read() (topology.HostData, error) {
	var h topology.HostData
	t := tree{f: r.files}
	root, err := t.f.EvalSymlinks(r.root)
	if err != nil {
		return h, fmt.Errorf("sysfs root %s: %w", r.root, err)
	}
	if h.PCI, err = t.readPCI(root, &h.Notes); err != nil {
		return h, err
	}
	for i := range h.PCI {
		if r.nvidiaProc != "" && topology.IsNVIDIAGPU(h.PCI[i].Vendor, h.PCI[i].Class) {
			if h.PCI[i].MemoryNUMANode, err = t.readNUMAStatus(r.nvidiaProc, h.PCI[i].Address); err != nil {
				return h, err
			}
		}
	}
	if h.RDMA, err = t.readRDMA(root); err != nil {
		return h, err
	}
	if h.NUMANodes, err = t.readNUMA(root); err != nil {
		return h, err
	}
	if h.GPUDirect, err = t.readGPUDirect(root, r.kernel, h); err != nil {
		return h, err
	}
	return h, nil
}

func (t tree) readPCI(root string, notes *[]string) ([]topology.PCIRecord, error) {
	dir := filepath.Join(root, "bus", "pci", "devices")
	entries, err := t.f.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	out := make([]topology.PCIRecord, 0, len(entries))
	for _, e := range entries {
		rec, err := t.readFunction(root, filepath.Join(dir, e.Name()), notes)
		if err != nil {
			return nil, fmt.Errorf("PCI device %s: %w", e.Name(), err)
		}
		out = append(out, rec)
	}
	return out, nil
}

func (t tree) readFunction(root, link string, notes *[]string) (topology.PCIRecord, error) {
	var rec topology.PCIRecord
	addr, err := topology.NormalizeBusID(filepath.Base(link))
	if err != nil {
		return rec, err
	}
	real, err := t.f.EvalSymlinks(link)
	if err != nil {
		return rec, fmt.Errorf("resolving %s: %w", link, err)
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return rec, fmt.Errorf("%s resolves to %s, outside the sysfs root %s", link, real, root)
	}
	rec.Address, rec.Path = addr, filepath.ToSlash(rel)
	vendor, err := t.readHex(real, "vendor", 16)
	if err != nil {
		return rec, err
	}
	device, err := t.readHex(real, "device", 16)
	if err != nil {
		return rec, err
	}
	class, err := t.readHex(real, "class", 24)
	if err != nil {
		return rec, err
	}
	rec.Vendor, rec.Device, rec.Class = uint16(vendor), uint16(device), uint32(class)
	rec.NUMANode = -1
	if s, ok, err := t.readOptional(real, "numa_node"); err != nil {
		return rec, err
	} else if ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < -1 {
			return rec, fmt.Errorf("%s: %q is not a NUMA node number", filepath.Join(real, "numa_node"), s)
		}
		rec.NUMANode = n
	}
	if s, ok, err := t.readOptional(real, "local_cpulist"); err != nil {
		return rec, err
	} else if ok {
		rec.LocalCPUs = s
	}
	if s, ok, err := t.readOptional(real, "sriov_totalvfs"); err != nil {
		return rec, err
	} else if ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return rec, fmt.Errorf("%s: %q is not a VF count", filepath.Join(real, "sriov_totalvfs"), s)
		}
		rec.TotalVFs = n
	}
	if rec.PhysFn, err = t.linkedAddress(filepath.Join(real, "physfn")); err != nil {
		return rec, err
	}
	vfs, err := t.f.Glob(filepath.Join(real, "virtfn*"))
	if err != nil {
		return rec, err
	}
	sort.Slice(vfs, func(i, j int) bool { return vfIndex(vfs[i]) < vfIndex(vfs[j]) })
	for _, vf := range vfs {
		a, err := t.linkedAddress(vf)
		if err != nil {
			return rec, err
		}
		rec.VFs = append(rec.VFs, a)
	}
	if rec.Class&0xffff00 == 0x060400 {
		if rec.ACS, err = t.readACS(real); err != nil {
			return rec, err
		}
	} else if rec.Vendor == vendorMellanox && rec.PhysFn == "" {
		var note string
		if rec.VPDUnique, note, err = t.readVPDUnique(real); err != nil {
			return rec, err
		} else if note != "" {
			*notes = append(*notes, note)
		}
	}
	return rec, nil
}

const vendorMellanox = 0x15b3

// readVPDUnique reads the "VU" keyword of a Mellanox function's VPD, what
// ties a ConnectX NIC to its Data Direct function. The vpd attribute is
// readable by root only, and reading it makes the device answer config
// cycles: without the file, or without the right to read it, the value is
// unknown. VPD that does not parse is a note, not an error: a device's
// VPD is firmware's, and a node must not stop being discovered over it.
func (t tree) readVPDUnique(dir string) (string, string, error) {
	path := filepath.Join(dir, "vpd")
	b, err := t.readBinary(path, topology.MaxVPD)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		return "", "", nil
	case err != nil:
		return "", fmt.Sprintf("%s: %v; its Data Direct function, if any, is not known", path, err), nil
	}
	v, _, err := topology.VPDReadOnly(b, topology.VPDUniqueKeyword)
	if err != nil {
		return "", fmt.Sprintf("%s: %v; its Data Direct function, if any, is not known", path, err), nil
	}
	return v, "", nil
}

// readNUMAStatus reads the NUMA node of a GPU's memory from the NVIDIA
// driver's numa_status ("Node:      2", nv-procfs.c), which the driver
// creates only for GPUs whose memory it manages as a NUMA node. No file, or
// a node of -1, is none.
func (t tree) readNUMAStatus(dir, addr string) (*int, error) {
	path := filepath.Join(dir, "gpus", addr, "numa_status")
	b, err := t.readBinary(path, 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "Node:")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < -1 || n > 1<<16 {
			return nil, fmt.Errorf("%s: Node %q is not a NUMA node number", path, strings.TrimSpace(v))
		}
		if n < 0 {
			return nil, nil
		}
		return &n, nil
	}
	return nil, fmt.Errorf("%s: no Node line", path)
}

// readACS reads a bridge's ACS state from its config space. Reading past
// the first 64 bytes needs CAP_SYS_ADMIN; without it the state is unknown,
// not an error.
func (t tree) readACS(dir string) (string, error) {
	path := filepath.Join(dir, "config")
	b, err := t.readBinary(path, 4096)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return topology.Unknown, nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	acs, err := topology.ACSFromConfig(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return acs, nil
}

func vfIndex(path string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(path), "virtfn"))
	return n
}

// linkedAddress reads a symlink to a PCI device (physfn, virtfnN, device) and
// returns the address it names; "" when the link does not exist.
func (t tree) linkedAddress(link string) (string, error) {
	target, err := t.f.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading link %s: %w", link, err)
	}
	addr, err := topology.NormalizeBusID(filepath.Base(target))
	if err != nil {
		return "", fmt.Errorf("link %s -> %s: %w", link, target, err)
	}
	return addr, nil
}

// maxAttribute bounds one sysfs attribute: every file discovery reads is a
// line of text (IDs, a cpulist, a link state), far under a page.
const maxAttribute = 4096

// readAttribute reads a sysfs attribute as untrusted input: only a regular
// file, opened without blocking (a FIFO in a fake or hostile tree must not
// hang discovery), and at most maxAttribute bytes (a link to /dev/zero
// must not grow the heap). A longer file is an error, not a truncation.
func (t tree) readAttribute(path string) ([]byte, error) {
	b, err := t.readBinary(path, maxAttribute)
	var pathErr *fs.PathError
	if err != nil && !errors.As(err, &pathErr) {
		return nil, fmt.Errorf("%s: %w", path, err) // readBinary's own errors do not name the file
	}
	return b, err
}

// readBinary reads a binary attribute (a config space) as readAttribute
// does text: a regular file, without blocking, at most limit bytes.
func (t tree) readBinary(path string, limit int) ([]byte, error) {
	f, err := t.f.OpenAttr(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("longer than %d bytes", limit)
	}
	return b, nil
}

func (t tree) readHex(dir, name string, bits int) (uint64, error) {
	path := filepath.Join(dir, name)
	b, err := t.readAttribute(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, bits)
	if err != nil || !strings.HasPrefix(strings.ToLower(s), "0x") {
		return 0, fmt.Errorf("%s: %q is not a %d-bit hex number like 0x10de", path, s, bits)
	}
	return v, nil
}

// readOptional reads a one-line file that may be absent.
func (t tree) readOptional(dir, name string) (string, bool, error) {
	path := filepath.Join(dir, name)
	b, err := t.readAttribute(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

func (t tree) readRDMA(root string) ([]topology.RDMARecord, error) {
	dir := filepath.Join(root, "class", "infiniband")
	entries, err := t.f.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no RDMA stack loaded: no NICs, not an error
	}
	if err != nil {
		return nil, fmt.Errorf("listing RDMA devices: %w", err)
	}
	var out []topology.RDMARecord
	for _, e := range entries {
		rec, err := t.readRDMADevice(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("RDMA device %s: %w", e.Name(), err)
		}
		out = append(out, rec)
	}
	return out, nil
}

func (t tree) readRDMADevice(dir string) (topology.RDMARecord, error) {
	rec := topology.RDMARecord{Name: filepath.Base(dir)}
	real, err := t.f.EvalSymlinks(dir)
	if err != nil {
		return rec, fmt.Errorf("resolving %s: %w", dir, err)
	}
	devLink := filepath.Join(real, "device")
	devReal, err := t.f.EvalSymlinks(devLink)
	if err != nil {
		return rec, fmt.Errorf("resolving %s: %w", devLink, err)
	}
	if rec.PCIAddress, err = topology.NormalizeBusID(filepath.Base(devReal)); err != nil {
		return rec, fmt.Errorf("%s -> %s is not a PCI device: %w", devLink, devReal, err)
	}
	ports, err := t.f.ReadDir(filepath.Join(real, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("listing ports: %w", err)
	}
	for _, p := range ports {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			return rec, fmt.Errorf("port directory %s is not a port number", filepath.Join(real, "ports", p.Name()))
		}
		pdir := filepath.Join(real, "ports", p.Name())
		port := topology.Port{Number: n}
		for name, dst := range map[string]*string{"link_layer": &port.LinkLayer, "rate": &port.Rate, "state": &port.State} {
			s, _, err := t.readOptional(pdir, name)
			if err != nil {
				return rec, err
			}
			*dst = s
		}
		port.PhysState, _, err = t.readOptional(pdir, "phys_state")
		if err != nil {
			return rec, err
		}
		// state reads "4: ACTIVE", phys_state "5: LinkUp": keep the word.
		port.State, port.PhysState = stateWord(port.State), stateWord(port.PhysState)
		if port.LinkLayer == "Ethernet" {
			if port.RoCEv2, err = t.readRoCEv2(pdir); err != nil {
				return rec, err
			}
		}
		rec.Ports = append(rec.Ports, port)
	}
	sort.Slice(rec.Ports, func(i, j int) bool { return rec.Ports[i].Number < rec.Ports[j].Number })
	nets, err := t.f.ReadDir(filepath.Join(devReal, "net"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("listing netdevs: %w", err)
	}
	for _, n := range nets {
		rec.Netdevs = append(rec.Netdevs, n.Name())
		if err := t.portMTU(filepath.Join(devReal, "net", n.Name()), len(nets), rec.Ports); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

func stateWord(s string) string {
	if _, word, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(word)
	}
	return s
}

// maxGIDs bounds the GID table read per port (the kernel's RoCE tables hold
// up to 255 entries; IB ports 128).
const maxGIDs = 256

// readRoCEv2 says whether an Ethernet port has a RoCE v2 GID: a nonzero
// entry of gids/ whose gid_attrs/types entry reads "RoCE v2". The kernel
// refuses to read the type of an empty entry (EINVAL), so those are
// skipped; no readable table at all is unknown.
func (t tree) readRoCEv2(port string) (string, error) {
	entries, err := t.f.ReadDir(filepath.Join(port, "gid_attrs", "types"))
	if err != nil {
		return topology.Unknown, nil
	}
	if len(entries) > maxGIDs {
		return "", fmt.Errorf("%s: %d GID entries, at most %d", filepath.Join(port, "gid_attrs", "types"), len(entries), maxGIDs)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		gid, ok, err := t.readOptional(filepath.Join(port, "gids"), e.Name())
		if err != nil || !ok || strings.Trim(gid, "0:") == "" {
			continue
		}
		typ, ok, err := t.readOptional(filepath.Join(port, "gid_attrs", "types"), e.Name())
		if err != nil || !ok {
			continue
		}
		if strings.EqualFold(typ, "RoCE v2") {
			return topology.Yes, nil
		}
	}
	return topology.No, nil
}

// portMTU gives the MTU of a netdev to its port: the one dev_port names
// (0-based), or port 1 when the device has one netdev and no dev_port.
func (t tree) portMTU(netdev string, netdevs int, ports []topology.Port) error {
	mtuText, ok, err := t.readOptional(netdev, "mtu")
	if err != nil || !ok {
		return err
	}
	mtu, err := strconv.Atoi(mtuText)
	if err != nil || mtu <= 0 || mtu > 1<<20 {
		return fmt.Errorf("%s: %q is not an MTU", filepath.Join(netdev, "mtu"), mtuText)
	}
	number := 1
	if s, ok, err := t.readOptional(netdev, "dev_port"); err != nil {
		return err
	} else if ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%s: %q is not a port index", filepath.Join(netdev, "dev_port"), s)
		}
		number = n + 1
	} else if netdevs > 1 {
		return nil // several netdevs and no way to tell their ports apart
	}
	for i := range ports {
		if ports[i].Number == number {
			ports[i].MTU = mtu
		}
	}
	return nil
}

func (t tree) readNUMA(root string) ([]topology.NUMANode, error) {
	dirs, err := t.f.Glob(filepath.Join(root, "devices", "system", "node", "node[0-9]*"))
	if err != nil {
		return nil, err
	}
	var out []topology.NUMANode
	for _, d := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			return nil, fmt.Errorf("NUMA node directory %s: not node<N>", d)
		}
		cpus, _, err := t.readOptional(d, "cpulist")
		if err != nil {
			return nil, err
		}
		node := topology.NUMANode{ID: id, CPUs: cpus}
		dist, _, err := t.readOptional(d, "distance")
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(dist) {
			v, err := strconv.Atoi(f)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%s: %q is not a list of distances", filepath.Join(d, "distance"), dist)
			}
			node.Distances = append(node.Distances, v)
		}
		if node.MemoryBytes, err = t.readMemTotal(d); err != nil {
			return nil, err
		}
		if node.HugePages, err = t.readHugePages(d); err != nil {
			return nil, err
		}
		out = append(out, node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// maxKB bounds a size in kB so that it converts to bytes in an int64.
const maxKB = math.MaxInt64 / 1024

// readMemTotal reads MemTotal from a NUMA node's meminfo ("Node 0 MemTotal:
// 263921836 kB"); 0 when the file is absent.
func (t tree) readMemTotal(dir string) (int64, error) {
	text, ok, err := t.readOptional(dir, "meminfo")
	if err != nil || !ok {
		return 0, err
	}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[2] != "MemTotal:" || f[4] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil || kb < 0 || kb > maxKB {
			return 0, fmt.Errorf("%s: MemTotal %q is not a size in kB", filepath.Join(dir, "meminfo"), f[3])
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s: no line \"Node N MemTotal: <size> kB\"", filepath.Join(dir, "meminfo"))
}

// maxHugePageSizes bounds the hugepages-<size>kB directories read per node
// (x86 has two sizes, arm64 four).
const maxHugePageSizes = 8

// readHugePages reads nr_hugepages of every page size of a NUMA node.
func (t tree) readHugePages(dir string) ([]topology.HugePages, error) {
	sizes, err := t.f.Glob(filepath.Join(dir, "hugepages", "hugepages-*kB"))
	if err != nil {
		return nil, err
	}
	if len(sizes) > maxHugePageSizes {
		return nil, fmt.Errorf("%s: %d huge page sizes, at most %d", filepath.Join(dir, "hugepages"), len(sizes), maxHugePageSizes)
	}
	var out []topology.HugePages
	for _, d := range sizes {
		name := filepath.Base(d)
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, "hugepages-"), "kB"), 10, 64)
		if err != nil || kb <= 0 || kb > maxKB {
			return nil, fmt.Errorf("%s: not hugepages-<size>kB", d)
		}
		text, ok, err := t.readOptional(d, "nr_hugepages")
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/(kb*1024) {
			return nil, fmt.Errorf("%s: %q is not a page count", filepath.Join(d, "nr_hugepages"), text)
		}
		out = append(out, topology.HugePages{PageBytes: kb * 1024, Count: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PageBytes < out[j].PageBytes })
	return out, nil
}

// Discover reads the tree and builds its Topology (GPUs from sysfs alone).
func (r *Reader) Discover() (*topology.Topology, error) {
	h, err := r.Read()
	if err != nil {
		return nil, err
	}
	return topology.FromHostData(h)
}
