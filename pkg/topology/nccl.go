package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// NCCL's GPUDirect RDMA rule, as NCCL v2.30.7-1 computes it (docs/levels.md,
// "Aligned: NCCL's rule", has the lines read). The nvidia-smi level (Level)
// and NCCL's path type differ in three places, and this file is about them:
//
//   - NCCL has one CPU node per NUMA node, so two root complexes of one NUMA
//     node are PHB to NCCL where nvidia-smi prints NODE.
//   - A GPU linked to its CPU by C2C (Grace) reaches a NIC on that CPU's
//     PCIe at P2C, which NCCL's default accepts for GPUDirect RDMA, where
//     nvidia-smi prints SYS or NODE.
//   - P2C is given only to the GPU's closest NICs: the fastest, then the
//     nearest (ncclTopoComputePaths, ncclTopoGetLocal). Other NICs of the
//     same CPU stay PHB.

// NCCLPath is NCCL's path type between a GPU and a NIC (src/include/graph.h).
// The order is NCCL's: a smaller path is closer.
type NCCLPath uint8

const (
	PathLOC NCCLPath = iota
	PathNVL
	PathNVB
	PathC2C
	PathPIX
	PathPXB
	PathP2C
	PathPXN
	PathPHB
	PathSYS
	PathNET
	PathDIS
)

var ncclPathNames = [...]string{"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"}

func (p NCCLPath) String() string {
	if int(p) < len(ncclPathNames) {
		return ncclPathNames[p]
	}
	return fmt.Sprintf("NCCLPath(%d)", uint8(p))
}

// MarshalText writes NCCL's name ("P2C").
func (p NCCLPath) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a name ParseNCCLLevel accepts.
func (p *NCCLPath) UnmarshalText(b []byte) error {
	v, err := ParseNCCLLevel(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParseNCCLPathName reads a path type by NCCL's name exactly (LOC ... DIS),
// as the schema publishes it; numbers are no names.
func ParseNCCLPathName(s string) (NCCLPath, bool) {
	for i, n := range ncclPathNames {
		if s == n {
			return NCCLPath(i), true
		}
	}
	return 0, false
}

// ncclOldLevels maps NCCL_NET_GDR_LEVEL's old numbers to path types
// (levelsOldToNew in paths.cc): 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and more SYS.
var ncclOldLevels = []NCCLPath{PathLOC, PathPIX, PathPXB, PathPHB, PathSYS, PathSYS}

// ParseNCCLLevel reads a value of NCCL_NET_GDR_LEVEL as NCCL's ncclGetLevel
// does: a path name from LOC to SYS, exactly as NCCL spells it, or an old
// level number (0-5; larger numbers count as SYS). Anything else is an
// error; NCCL would ignore it and keep its default, which the caller says.
func ParseNCCLLevel(s string) (NCCLPath, error) {
	for i := PathLOC; i <= PathSYS; i++ {
		if s == ncclPathNames[i] {
			return i, nil
		}
	}
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		// NCCL reads the number with strtol: leading digits, the rest ignored.
		end := 0
		for end < len(s) && end < 20 && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		n, err := strconv.ParseUint(s[:end], 10, 64)
		if err != nil || n >= uint64(len(ncclOldLevels)) {
			return PathSYS, nil
		}
		return ncclOldLevels[n], nil
	}
	return 0, fmt.Errorf("NCCL level %.64q: want one of LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or a number 0-5", s)
}

// NCCLRule is what decides NCCL's GPUDirect RDMA cut-off: the environment a
// pod's NCCL reads. The zero value is NCCL's default.
type NCCLRule struct {
	// GDRLevel is NCCL_NET_GDR_LEVEL when set (nil: unset).
	GDRLevel *NCCLPath
	// NoC2C is NCCL_NET_GDR_C2C=0: without a level, the cut-off is PXB
	// instead of P2C.
	NoC2C bool
}

// Level is the farthest path at which NCCL uses GPUDirect RDMA
// (ncclTopoCheckGdr: netGdrLevel).
func (r NCCLRule) Level() NCCLPath {
	if r.GDRLevel != nil {
		return *r.GDRLevel
	}
	if r.NoC2C {
		return PathPXB
	}
	return PathP2C
}

// Eligible reports whether NCCL uses GPUDirect RDMA on a path under the rule.
func (r NCCLRule) Eligible(p NCCLPath) bool { return p <= r.Level() }

// String spells the rule as the environment that makes it.
func (r NCCLRule) String() string {
	var parts []string
	if r.GDRLevel != nil {
		parts = append(parts, "NCCL_NET_GDR_LEVEL="+r.GDRLevel.String())
	}
	if r.NoC2C {
		parts = append(parts, "NCCL_NET_GDR_C2C=0")
	}
	if len(parts) == 0 {
		return "NCCL's defaults"
	}
	return strings.Join(parts, " ")
}

// GPUDirectPair is NCCL's view of one GPU-NIC pair.
type GPUDirectPair struct {
	GPU int    `json:"gpu"`
	NIC string `json:"nic"`
	// NCCLPath is the path type NCCL computes, before any PXN relay.
	NCCLPath NCCLPath `json:"ncclPath"`
	// Eligible is whether NCCL's defaults use GPUDirect RDMA on it.
	Eligible bool `json:"eligible"`
}

// GPUDirectPairs lists every GPU-NIC pair in GPU then NIC order, with NCCL's
// path and whether NCCL's defaults use GPUDirect RDMA on it: the path at
// the cut-off or closer, and neither side known unable to (ncclTopoCheckGdr
// checks gdrSupport first; NCCL then routes the pair through the CPU).
func (t *Topology) GPUDirectPairs() []GPUDirectPair {
	paths := t.NCCLPaths()
	out := make([]GPUDirectPair, 0, len(t.GPUs)*len(t.NICs))
	for i, g := range t.GPUs {
		for j, n := range t.NICs {
			p := paths[i][j]
			ok := NCCLRule{}.Eligible(p) && g.GDR != No && n.GDR != No
			out = append(out, GPUDirectPair{GPU: g.Index, NIC: n.Name, NCCLPath: p, Eligible: ok})
		}
	}
	return out
}

// ncclNode is where NCCL places a function: its CPU (one per NUMA node of a
// host) and the PCIe switches above it, nearest first.
type ncclNode struct {
	host     string
	cpu      int
	switches []string
}

// bcmGen is the Broadcom switch generation NCCL flattens
// (ncclTopoFlattenBcmSwitches, getBcmGen), 0 for other parts. NCCL also
// checks the subsystem IDs, which the model does not carry: a Broadcom part
// below the same part is taken for its virtual sub-switch.
func bcmGen(b Bridge) int {
	switch {
	case b.Vendor == 0x1000 && b.Device == 0xc010:
		return 4
	case b.Vendor == 0x1000 && b.Device == 0xc030:
		return 5
	}
	return 0
}

// ncclPlace turns a function into NCCL's node. NCCL walks sysfs up two
// levels at a time (ncclTopoGetXmlFromSys: "Rewind two /"), so its switch
// nodes are the bridges two, four, ... above the function, the upstream
// ports; the root port and the downstream ports are not nodes.
func ncclPlace(f PCIFunction, bridges map[string]Bridge, rcs map[string]RootComplex) ncclNode {
	rc, ok := rcs[f.RootComplex]
	numa := rc.NUMANode
	if !ok {
		numa = f.NUMANode
	}
	n := ncclNode{host: rc.Host, cpu: effectiveNUMA(numa)}
	for i := len(f.Bridges) - 2; i >= 0; i -= 2 {
		sw := f.Bridges[i]
		if k := len(n.switches); k > 0 {
			// A Broadcom sub-switch below its own part is flattened into
			// the parent: the parent replaces it.
			if g := bcmGen(bridges[n.switches[k-1]]); g != 0 && g == bcmGen(bridges[sw]) {
				n.switches[k-1] = sw
				continue
			}
		}
		n.switches = append(n.switches, sw)
	}
	return n
}

// pciePath is NCCL's path between two functions over PCIe and CPUs only.
func pciePath(a, b ncclNode) NCCLPath {
	switch {
	case a.host != b.host:
		return PathNET
	case a.cpu != b.cpu:
		return PathSYS
	}
	for i, s := range a.switches {
		for j, u := range b.switches {
			if s == u {
				if i == 0 && j == 0 {
					return PathPIX
				}
				return PathPXB
			}
		}
	}
	return PathPHB
}

// NCCLPaths is NCCL's path type between every GPU (rows, in t.GPUs order) and
// every NIC (columns, in t.NICs order), P2C included, before any PXN relay,
// each NIC placed where its DMA enters the tree (its Data Direct function
// when it has one, NIC.DMAFunction):
//   - over PCIe: PIX when both hang off one switch, PXB when they share one
//     higher up, PHB through their CPU, SYS across CPUs, NET across hosts;
//   - a GPU with C2C to its CPU gets P2C to those of its closest NICs that
//     hang off that CPU (mergePathType: C2C then PHB is P2C). Closest is
//     NCCL's ncclTopoGetLocal: the fastest path, then the nearest type. The
//     path's speed is taken as the NIC's port rate, the narrowest link on
//     the machines nicaffinity knows (PCIe Gen5 x16 and C2C are wider than
//     a 400 Gb/s port); an unknown rate ties with every other.
func (t *Topology) NCCLPaths() [][]NCCLPath {
	bridges := make(map[string]Bridge, len(t.Bridges))
	for _, b := range t.Bridges {
		bridges[b.Address] = b
	}
	rcs := make(map[string]RootComplex, len(t.RootComplexes))
	for _, rc := range t.RootComplexes {
		rcs[rc.ID] = rc
	}
	nics := make([]ncclNode, len(t.NICs))
	rates := make([]float64, len(t.NICs))
	for j, n := range t.NICs {
		nics[j] = ncclPlace(n.DMAFunction(), bridges, rcs)
		rates[j] = n.RateGbps()
	}
	out := make([][]NCCLPath, len(t.GPUs))
	for i, g := range t.GPUs {
		gn := ncclPlace(g.PCI, bridges, rcs)
		row := make([]NCCLPath, len(t.NICs))
		for j := range t.NICs {
			row[j] = pciePath(gn, nics[j])
		}
		if g.C2C != "" {
			promoteP2C(row, rates, gn, nics)
		}
		out[i] = row
	}
	return out
}

// promoteP2C gives P2C to the GPU's closest NICs on its own CPU.
func promoteP2C(row []NCCLPath, rates []float64, g ncclNode, nics []ncclNode) {
	best, bestType := -1.0, PathDIS
	for j, p := range row {
		if p == PathNET {
			continue
		}
		if rates[j] > best || (rates[j] == best && p < bestType) {
			best, bestType = rates[j], p
		}
	}
	for j, p := range row {
		// The NIC's own path to the GPU's CPU is PHB exactly when it hangs
		// off that CPU: same host, same NUMA node.
		if rates[j] == best && p == bestType && nics[j].host == g.host && nics[j].cpu == g.cpu {
			row[j] = min(p, PathP2C)
		}
	}
}

// RateGbps is the fastest port rate of the NIC in Gb/s as sysfs words it
// ("400 Gb/sec (4X NDR)"), 0 when no port says.
func (n NIC) RateGbps() float64 {
	best := 0.0
	for _, p := range n.Ports {
		f := strings.Fields(p.Rate)
		if len(f) < 2 || !strings.HasPrefix(f[1], "Gb/s") {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil && v > best && v < 1e6 {
			best = v
		}
	}
	return best
}

// AlignLevels are the levels the decisions use between every GPU (rows, in
// t.GPUs order) and every NIC (columns, in t.NICs order): nvidia-smi's
// level, except LevelP2C where NCCL's rule gives the pair P2C and the level
// is farther, and, for a NIC with a Data Direct function, the level of
// NCCL's path from that function where it is closer (PIX, PXB or P2C)
// (docs/levels.md). Without C2C or Data Direct they are the matrix's levels.
func (t *Topology) AlignLevels() [][]Level {
	align, _ := t.AlignLevelsAndPaths()
	return align
}

// ShownLevel is max level l as this machine can tell it: P2C or closer is
// PXB or closer where no GPU-NIC pair is at P2C (no Grace GPU), and
// reports then say PXB, as the scheduler's do.
func (t *Topology) ShownLevel(l Level) Level {
	if l != LevelP2C {
		return l
	}
	for _, row := range t.AlignLevels() {
		for _, a := range row {
			if a == LevelP2C {
				return l
			}
		}
	}
	return LevelPXB
}

// AlignLevelsAndPaths are AlignLevels and the NCCLPaths they come from,
// computed once.
func (t *Topology) AlignLevelsAndPaths() ([][]Level, [][]NCCLPath) {
	m := t.Matrix()
	paths := t.NCCLPaths()
	out := make([][]Level, len(t.GPUs))
	for i := range t.GPUs {
		out[i] = make([]Level, len(t.NICs))
		for j := range t.NICs {
			l := m.Cells[i][len(t.GPUs)+j].Level
			if paths[i][j] == PathP2C && l > LevelP2C {
				l = LevelP2C
			}
			if t.NICs[j].DataDirect != nil {
				if dl, ok := dataDirectLevels[paths[i][j]]; ok && dl < l {
					l = dl
				}
			}
			out[i][j] = l
		}
	}
	return out, paths
}

// dataDirectLevels are the decision levels NCCL's paths from a Data Direct
// function give where they are closer than the PF's nvidia-smi level: the
// paths NCCL's defaults use GPUDirect RDMA on. The rest keep the PF's
// level, which is what nvidia-smi prints and no farther than NCCL's.
var dataDirectLevels = map[NCCLPath]Level{PathPIX: LevelPIX, PathPXB: LevelPXB, PathP2C: LevelP2C}
