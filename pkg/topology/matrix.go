package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// Matrix is the table `nvidia-smi topo -m` prints: GPUs then NICs, the level
// of every pair, and each GPU's CPU and NUMA affinity.
type Matrix struct {
	Devices []MatrixDevice `json:"devices"`
	// Cells[i][j] is the level between Devices[i] and Devices[j].
	Cells [][]Link `json:"cells"`
}

// MatrixDevice is one row (and column) of the matrix.
type MatrixDevice struct {
	// Label is "GPU<n>" or "NIC<n>", as nvidia-smi numbers them.
	Label string `json:"label"`
	// Name is the RDMA device name for NICs ("mlx5_0"), the GPU name for GPUs.
	Name  string `json:"name,omitempty"`
	BusID string `json:"busID,omitempty"`
	UUID  string `json:"uuid,omitempty"`
	// Affinity columns, for GPUs only. Empty when unknown ("N/A").
	CPUAffinity  string `json:"cpuAffinity,omitempty"`
	NUMAAffinity string `json:"numaAffinity,omitempty"`
	GPUNUMAID    string `json:"gpuNumaID,omitempty"`
	// DataDirect is, for a NIC with a ConnectX Data Direct function, that
	// function's bus ID: where NCCL measures the NIC's paths from
	// (docs/levels.md). The matrix's levels are the PF's, as nvidia-smi's.
	DataDirect string `json:"dataDirect,omitempty"`
}

// IsGPU reports whether the row is a GPU.
func (d MatrixDevice) IsGPU() bool { return strings.HasPrefix(d.Label, "GPU") }

// Matrix computes the level of every GPU-GPU, GPU-NIC and NIC-NIC pair.
func (t *Topology) Matrix() *Matrix {
	p := newPlacer(t)
	n := len(t.GPUs) + len(t.NICs)
	m := &Matrix{Devices: make([]MatrixDevice, 0, n), Cells: make([][]Link, n)}
	places := make([]placement, 0, n)
	gpuRow := map[int]int{}
	for i, g := range t.GPUs {
		gpuRow[g.Index] = i
		d := MatrixDevice{Label: "GPU" + strconv.Itoa(i), Name: g.Name, BusID: g.PCI.Address, UUID: g.UUID, CPUAffinity: g.CPUAffinity}
		// nvidia-smi prints 0 where the kernel says -1 (seen on a one-H200 VM).
		d.NUMAAffinity = strconv.Itoa(effectiveNUMA(g.PCI.NUMANode))
		if g.MemoryNUMANode >= 0 {
			d.GPUNUMAID = strconv.Itoa(g.MemoryNUMANode)
		}
		m.Devices = append(m.Devices, d)
		pl := p.place(g.PCI)
		if g.MemoryNUMANode >= 0 {
			// A coherent GPU (Grace C2C) counts as its memory's NUMA node,
			// which no NIC shares: nvidia-smi prints SYS to every NIC of a
			// GB200 tray.
			pl.numa = g.MemoryNUMANode
		}
		places = append(places, pl)
	}
	for i, nic := range t.NICs {
		d := MatrixDevice{Label: "NIC" + strconv.Itoa(i), Name: nic.Name, BusID: nic.PCI.Address}
		if nic.DataDirect != nil {
			d.DataDirect = nic.DataDirect.Address
		}
		m.Devices = append(m.Devices, d)
		places = append(places, p.place(nic.PCI))
	}
	for i := range m.Cells {
		m.Cells[i] = make([]Link, n)
		for j := range m.Cells[i] {
			if i == j {
				m.Cells[i][j] = Link{Level: LevelX}
				continue
			}
			m.Cells[i][j] = Link{Level: between(places[i], places[j])}
		}
	}
	// NVLink wins over PCIe between GPUs, as in nvidia-smi.
	for _, l := range t.NVLinks {
		a, okA := gpuRow[l.GPU]
		b, okB := gpuRow[l.Peer]
		if !okA || !okB || a == b {
			continue
		}
		m.Cells[a][b] = Link{Level: LevelNV, NVLinks: l.Count}
		m.Cells[b][a] = Link{Level: LevelNV, NVLinks: l.Count}
	}
	return m
}

// Index returns the row of the device with the given label, or -1.
func (m *Matrix) Index(label string) int {
	for i, d := range m.Devices {
		if d.Label == label {
			return i
		}
	}
	return -1
}

const smiLegend = `Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// Format writes the matrix in the layout of `nvidia-smi topo -m`: tab-separated
// columns, the affinity columns for GPUs, the legend and the NIC legend.
func (m *Matrix) Format() string {
	var b strings.Builder
	for _, d := range m.Devices {
		b.WriteString("\t" + d.Label)
	}
	b.WriteString("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n")
	for i, d := range m.Devices {
		b.WriteString(d.Label)
		for j := range m.Devices {
			cell := m.Cells[i][j].String()
			if i == j {
				cell = " X "
			}
			b.WriteString("\t" + cell)
		}
		if d.IsGPU() {
			b.WriteString("\t" + orNA(d.CPUAffinity) + "\t" + orNA(d.NUMAAffinity) + "\t\t" + orNA(d.GPUNUMAID))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n" + smiLegend)
	nics := false
	for _, d := range m.Devices {
		if d.IsGPU() {
			continue
		}
		if !nics {
			b.WriteString("\nNIC Legend:\n\n")
			nics = true
		}
		fmt.Fprintf(&b, "  %s: %s\n", d.Label, d.Name)
	}
	return b.String()
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}
