package topology

// The counting rule (docs/levels.md has the matrices that pin it down):
//
//   - Each function's path is the chain of bridges from its root port down to
//     it. PCIe alternates them: root port, then for every switch its upstream
//     port and the downstream port the path leaves it by.
//   - Broadcom PEX89xxx (0x1000:0xc030) present one physical switch as a top
//     virtual switch with virtual sub-switches below it. NCCL flattens them
//     (ncclTopoFlattenBcmSwitches) and nvidia-smi reports PIX across them on
//     HGX H100 boards, so a sub-switch whose parent switch is the same part is
//     folded into its parent before counting.
//   - Different hosts: SYS. Different root complexes: NODE on one NUMA node,
//     SYS across nodes (numa_node -1 counts as node 0).
//   - One root complex, no bridge in common: PHB.
//   - Otherwise take the deepest bridge both paths share. PIX when at most one
//     bridge lies below it on each side (siblings behind one switch, or
//     functions of one device); PXB when more do (a switch behind a switch).

// flattenedSwitches are the switch parts whose virtual sub-switches count as the
// parent switch.
var flattenedSwitches = map[[2]uint16]bool{
	{0x1000, 0xc030}: true, // Broadcom PEX89xxx (Gen5)
}

// placement is where a function sits, ready for pairwise comparison.
type placement struct {
	address string
	rc      string
	host    string
	numa    int
	chain   []string
}

// placer turns functions into placements; it holds the bridge and root
// complex tables so each path is folded once.
type placer struct {
	bridges map[string]Bridge
	rcs     map[string]RootComplex
}

func newPlacer(t *Topology) placer {
	p := placer{bridges: make(map[string]Bridge, len(t.Bridges)), rcs: make(map[string]RootComplex, len(t.RootComplexes))}
	for _, b := range t.Bridges {
		p.bridges[b.Address] = b
	}
	for _, rc := range t.RootComplexes {
		p.rcs[rc.ID] = rc
	}
	return p
}

func (p placer) place(f PCIFunction) placement {
	rc := p.rcs[f.RootComplex]
	numa := rc.NUMANode
	if _, ok := p.rcs[f.RootComplex]; !ok {
		numa = f.NUMANode
	}
	return placement{address: f.Address, rc: f.RootComplex, host: rc.Host, numa: effectiveNUMA(numa), chain: p.fold(f.Bridges)}
}

// fold removes the (downstream port, upstream port) pairs that lead into a
// virtual sub-switch of a flattened switch part.
func (p placer) fold(chain []string) []string {
	out := make([]string, 0, len(chain))
	for i := 0; i < len(chain); i++ {
		out = append(out, chain[i])
		// out holds root port, then upstream/downstream pairs: an upstream port
		// sits at an odd index of out.
		n := len(out)
		if n >= 4 && n%2 == 0 {
			up, parentUp := p.bridges[out[n-1]], p.bridges[out[n-3]]
			part := [2]uint16{up.Vendor, up.Device}
			if flattenedSwitches[part] && part == [2]uint16{parentUp.Vendor, parentUp.Device} {
				// Drop the parent's downstream port and this upstream port.
				out = out[:n-2]
			}
		}
	}
	return out
}

// between is the level between two placed functions.
// Two RDMA devices on one function (ports NCCL lists apart) compare as
// functions of one device: PIX.
func between(a, b placement) Level {
	if a.host != b.host {
		return LevelSYS
	}
	if a.rc != b.rc {
		if a.numa == b.numa {
			return LevelNODE
		}
		return LevelSYS
	}
	common := 0
	for common < len(a.chain) && common < len(b.chain) && a.chain[common] == b.chain[common] {
		common++
	}
	if common == 0 {
		return LevelPHB
	}
	if len(a.chain)-common <= 1 && len(b.chain)-common <= 1 {
		return LevelPIX
	}
	return LevelPXB
}

// PCILevel is the PCIe level between two functions of t.
func (t *Topology) PCILevel(a, b PCIFunction) Level {
	if a.Address == b.Address {
		return LevelX
	}
	p := newPlacer(t)
	return between(p.place(a), p.place(b))
}
