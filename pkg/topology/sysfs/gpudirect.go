package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// maxVerbsDevices bounds /sys/class/infiniband_verbs (one entry per RDMA
// device; a node has tens, a host with every VF enabled a few hundred).
const maxVerbsDevices = 4096

// readGPUDirect reads the host facts GPUDirect RDMA depends on, and the
// verbs device of every RDMA device in h. Facts that cannot be read stay
// unknown; the result is nil when none could be read (a tree without
// module or IOMMU data, as most fixtures are).
func (t tree) readGPUDirect(root, kernel string, h topology.HostData) (*topology.GPUDirect, error) {
	g := &topology.GPUDirect{KernelRelease: kernel}
	modules := filepath.Join(root, "module")
	_, err := t.f.Stat(modules)
	modulesKnown := err == nil
	if modulesKnown {
		g.PeerMem = topology.PeerMemAbsent
		for _, m := range []string{"nvidia_peermem", "nv_peer_mem"} {
			if _, err := t.f.Stat(filepath.Join(modules, m)); err == nil {
				g.PeerMem = topology.PeerMemLoaded
			}
		}
		for _, m := range topology.RDMADriverModules {
			if _, err := t.f.Stat(filepath.Join(modules, m)); err == nil {
				g.RDMADrivers = append(g.RDMADrivers, m)
			}
		}
		g.NVIDIAModule = topology.ModuleAbsent
		if _, err := t.f.Stat(filepath.Join(modules, "nvidia")); err == nil {
			// The kernel's taint letters: P marks a proprietary module.
			taint, ok, err := t.readOptional(filepath.Join(modules, "nvidia"), "taint")
			switch {
			case err != nil || !ok:
				g.NVIDIAModule = topology.Unknown
			case strings.Contains(taint, "P"):
				g.NVIDIAModule = topology.ModuleProp
			default:
				g.NVIDIAModule = topology.ModuleOpen
			}
		}
	}
	if g.IOMMU, err = t.readIOMMU(root, h.PCI); err != nil {
		return nil, err
	}
	verbs, err := t.readVerbs(root)
	if err != nil {
		return nil, err
	}
	if verbs == nil && modulesKnown {
		if _, err := t.f.Stat(filepath.Join(modules, "ib_uverbs")); err != nil {
			verbs = map[string]string{} // ib_uverbs not loaded: no verbs devices
		}
	}
	if verbs != nil {
		g.UVerbs = topology.Yes
		for i := range h.RDMA {
			h.RDMA[i].UVerbs = topology.No
			if v, ok := verbs[h.RDMA[i].Name]; ok {
				h.RDMA[i].UVerbs = v
			}
		}
	}
	if !modulesKnown && g.IOMMU == topology.Unknown && g.UVerbs == topology.Unknown {
		return nil, nil
	}
	return g, nil
}

// readIOMMU: no /sys/class/iommu is unknown (a kernel without IOMMU
// support, or a tree without it); an empty one is off; otherwise the
// domain type of the GPUs' groups: identity is passthrough, DMA or DMA-FQ
// translated.
func (t tree) readIOMMU(root string, pci []topology.PCIRecord) (string, error) {
	units, err := t.f.ReadDir(filepath.Join(root, "class", "iommu"))
	if err != nil {
		return topology.Unknown, nil
	}
	if len(units) == 0 {
		return topology.IOMMUOff, nil
	}
	mode := topology.Unknown
	for _, r := range pci {
		if !topology.IsNVIDIAGPU(r.Vendor, r.Class) {
			continue
		}
		dir := filepath.Join(root, filepath.FromSlash(r.Path), "iommu_group")
		typ, ok, err := t.readOptional(dir, "type")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		switch {
		case !ok:
			continue
		case strings.HasPrefix(typ, "DMA"):
			return topology.IOMMUXlate, nil
		case typ == "identity":
			mode = topology.IOMMUPassthru
		}
	}
	return mode, nil
}

// readVerbs maps RDMA device names to their verbs devices
// (/sys/class/infiniband_verbs/uverbsN/ibdev); nil when the class is not
// there.
func (t tree) readVerbs(root string) (map[string]string, error) {
	dir := filepath.Join(root, "class", "infiniband_verbs")
	entries, err := t.f.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing verbs devices: %w", err)
	}
	if len(entries) > maxVerbsDevices {
		return nil, fmt.Errorf("%s: %d entries, at most %d", dir, len(entries), maxVerbsDevices)
	}
	out := map[string]string{}
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "uverbs")); err != nil || n < 0 || n > 9999 || !strings.HasPrefix(e.Name(), "uverbs") {
			continue // abi_version, or a name the kernel does not make
		}
		ibdev, ok, err := t.readOptional(filepath.Join(dir, e.Name()), "ibdev")
		if err != nil {
			return nil, err
		}
		if ok {
			out[ibdev] = e.Name()
		}
	}
	return out, nil
}
