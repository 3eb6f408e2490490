// Package gpualloc is go-gpuallocator's view of a topology: the NVIDIA
// device plugin's best-effort GPU choice, for the simulated kubelet and for
// the stand-in device plugin of tests.
package gpualloc

import (
	"github.com/NVIDIA/go-gpuallocator/gpuallocator"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// GPUID is the device-plugin ID of GPU position i: its UUID, else its bus ID.
func GPUID(t *topology.Topology, i int) string {
	if t.GPUs[i].UUID != "" {
		return t.GPUs[i].UUID
	}
	return t.GPUs[i].PCI.Address
}

// linkType maps a matrix cell to go-gpuallocator's P2P link types (the order
// of its internal/links constants): PCIe levels 1..5, NVLink 6+n.
func linkTypes(l topology.Link) []int {
	pcie := map[topology.Level]int{topology.LevelSYS: 1, topology.LevelNODE: 2, topology.LevelPHB: 3, topology.LevelPXB: 4, topology.LevelPIX: 5}
	if l.Level == topology.LevelNV {
		return []int{6 + min(max(l.NVLinks, 1), 18)}
	}
	return []int{pcie[l.Level]}
}

// Devices is go-gpuallocator's view of the topology's GPUs: IDs as the
// device plugin names them, links from the matrix.
func Devices(t *topology.Topology) []*gpuallocator.Device {
	m := t.Matrix()
	var gpus []*gpuallocator.Device
	for i := range t.GPUs {
		d := &gpuallocator.Device{Index: i, Links: map[int][]gpuallocator.P2PLink{}}
		d.UUID = GPUID(t, i)
		gpus = append(gpus, d)
	}
	for i, d := range gpus {
		for j, peer := range gpus {
			if i == j {
				continue
			}
			for _, lt := range linkTypes(m.Cells[i][j]) {
				d.Links[j] = append(d.Links[j], p2pLink(peer, lt))
			}
		}
	}
	return gpus
}

// BestEffortIDs is the NVIDIA device plugin's preferred allocation:
// go-gpuallocator's best-effort policy over the GPUs of t that available
// names (device IDs as GPUID gives them), with required among them.
func BestEffortIDs(t *topology.Topology, available, required []string, size int) []string {
	byID := map[string]*gpuallocator.Device{}
	for _, d := range Devices(t) {
		byID[d.UUID] = d
	}
	pick := func(ids []string) []*gpuallocator.Device {
		var out []*gpuallocator.Device
		for _, id := range ids {
			if d, ok := byID[id]; ok {
				out = append(out, d)
			}
		}
		return out
	}
	var out []string
	for _, d := range gpuallocator.NewBestEffortPolicy().Allocate(pick(available), pick(required), size) {
		out = append(out, d.UUID)
	}
	return out
}
