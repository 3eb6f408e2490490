// Package dra answers, over the topology model, whether Dynamic Resource
// Allocation's standard pcieRoot attribute is enough to align GPUs with
// their NICs on a machine, and builds ResourceClaimTemplates that align
// them: matchAttribute on pcieRoot where it is enough, a derived attribute
// that maps each device's PCI bus ID to its PCIe switch where it is not.
// It is pure: no I/O, no API calls.
package dra

import (
	"fmt"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Standard attributes (resource.kubernetes.io) that DRA drivers publish
// for PCI devices: the root complex a device hangs under, and its address.
const (
	Domain       = "resource.kubernetes.io"
	AttrPCIeRoot = Domain + "/pcieRoot"
	AttrPCIBusID = Domain + "/pciBusID"
	// SwitchAttr is the derived attribute that names a device's
	// alignment group.
	SwitchAttr = "nicaffinity.io/pcieSwitch"
)

// Pair is one GPU and one NIC (an RDMA PF) of a machine.
type Pair struct {
	GPU      int    `json:"gpu"`
	GPUBusID string `json:"gpuBusID"`
	GPURoot  string `json:"gpuRoot"`
	NIC      string `json:"nic"`
	NICBusID string `json:"nicBusID"`
	NICRoot  string `json:"nicRoot"`
	Level    string `json:"level"`
}

// Check is the answer for one machine.
type Check struct {
	Machine  string `json:"machine"`
	MaxLevel string `json:"maxLevel"`
	// Known is false when the source names no host bridges (NCCL XML and
	// the profiles built from it group devices by CPU), so pcieRoot cannot
	// be told; Why says so.
	Known bool   `json:"known"`
	Why   string `json:"why,omitempty"`
	// Enough: every GPU-NIC pair that shares a pcieRoot is at MaxLevel or
	// closer, and every GPU with an aligned NIC shares a root with one, so
	// matchAttribute on pcieRoot gives aligned pairs and loses none.
	Enough bool `json:"enough"`
	// SameRoot counts the pairs that share a root; Unaligned lists those of
	// them past MaxLevel (what matchAttribute lets through).
	SameRoot  int    `json:"sameRootPairs"`
	Unaligned []Pair `json:"sameRootUnaligned,omitempty"`
	// Missed lists aligned pairs on different roots (what matchAttribute
	// refuses: ConnectX-8 Data Direct is reported to give the NIC its own root).
	Missed []Pair `json:"alignedAcrossRoots,omitempty"`
	// Stranded are GPUs with an aligned NIC but none on their root.
	Stranded []int `json:"stranded,omitempty"`
}

// CheckTopology answers for t whether pcieRoot equality implies a level of
// maxLevel or closer for every GPU-NIC pair.
func CheckTopology(machine string, t *topology.Topology, maxLevel topology.Level) Check {
	c := Check{Machine: machine, MaxLevel: maxLevel.String(), Known: t.Source == "sysfs"}
	if !c.Known {
		c.Why = fmt.Sprintf("the %s source names no PCIe host bridges, only CPUs: pcieRoot cannot be told from it (read the machine's sysfs instead)", t.Source)
		return c
	}
	// The decision levels: P2C where NCCL's rule gives a Grace GPU's pair
	// P2C, which no pcieRoot match can see. Without such a pair P2C or
	// closer is PXB or closer, and the check says PXB.
	align := t.AlignLevels()
	if maxLevel == topology.LevelP2C && !hasP2C(align) {
		c.MaxLevel = topology.LevelPXB.String()
	}
	for i, g := range t.GPUs {
		sameRootAligned, anyAligned := false, false
		for j, n := range t.NICs {
			if n.PhysFn != "" {
				continue
			}
			l := align[i][j]
			p := Pair{GPU: g.Index, GPUBusID: g.PCI.Address, GPURoot: g.PCI.RootComplex, NIC: n.Name, NICBusID: n.PCI.Address, NICRoot: n.PCI.RootComplex, Level: l.String()}
			same := g.PCI.RootComplex == n.PCI.RootComplex
			aligned := l <= maxLevel
			anyAligned = anyAligned || aligned
			switch {
			case same && aligned:
				c.SameRoot++
				sameRootAligned = true
			case same:
				c.SameRoot++
				c.Unaligned = append(c.Unaligned, p)
			case aligned:
				c.Missed = append(c.Missed, p)
			}
		}
		if anyAligned && !sameRootAligned {
			c.Stranded = append(c.Stranded, g.Index)
		}
	}
	c.Enough = len(c.Unaligned) == 0 && len(c.Stranded) == 0
	return c
}

// shortfall says why pcieRoot is not Enough: same-root pairs past the
// level, GPUs whose aligned NICs are all on other roots, or both.
func (c Check) shortfall() string {
	var parts []string
	if len(c.Unaligned) > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d same-root GPU-NIC pairs are past %s", len(c.Unaligned), c.SameRoot, c.MaxLevel))
	}
	if len(c.Stranded) > 0 {
		parts = append(parts, fmt.Sprintf("%d GPUs have their NICs at %s or closer on other roots only", len(c.Stranded), c.MaxLevel))
	}
	return strings.Join(parts, "; ")
}

func hasP2C(levels [][]topology.Level) bool {
	for _, row := range levels {
		for _, l := range row {
			if l == topology.LevelP2C {
				return true
			}
		}
	}
	return false
}
