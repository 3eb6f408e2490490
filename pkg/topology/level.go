package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// Level is how far apart two devices sit, with the meanings `nvidia-smi topo -m`
// prints. The order is the order of preference: a smaller Level is closer.
type Level uint8

const (
	// LevelX is a device with itself.
	LevelX Level = iota
	// LevelNV is a bonded set of NVLinks between two GPUs; Link.NVLinks says how many.
	LevelNV
	// LevelPIX traverses at most a single PCIe bridge (one switch).
	LevelPIX
	// LevelPXB traverses several PCIe bridges but no host bridge.
	LevelPXB
	// LevelP2C is not an nvidia-smi level: it is NCCL's P2C, a GPU linked to
	// its CPU by C2C reaching one of its closest NICs on that CPU's PCIe
	// (nvidia-smi prints SYS or NODE there). It sits where NCCL orders it,
	// after PXB and before PHB, and NCCL's default uses GPUDirect RDMA on
	// it. Only the decision levels (Topology.AlignLevels) carry it; a
	// matrix never does.
	LevelP2C
	// LevelPHB traverses a PCIe host bridge (the CPU's root complex).
	LevelPHB
	// LevelNODE traverses the interconnect between host bridges within a NUMA node.
	LevelNODE
	// LevelSYS traverses the SMP interconnect between NUMA nodes (QPI/UPI, xGMI).
	LevelSYS
)

var levelNames = [...]string{
	LevelX:    "X",
	LevelNV:   "NV",
	LevelPIX:  "PIX",
	LevelPXB:  "PXB",
	LevelP2C:  "P2C",
	LevelPHB:  "PHB",
	LevelNODE: "NODE",
	LevelSYS:  "SYS",
}

// Levels lists the levels a NIC can be at from a GPU in the decisions,
// best first: nvidia-smi's, with NCCL's P2C in NCCL's place.
var Levels = []Level{LevelPIX, LevelPXB, LevelP2C, LevelPHB, LevelNODE, LevelSYS}

func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// ParseLevel reads a level name as nvidia-smi prints it ("PIX", "NODE", ...),
// or P2C, the decision level NCCL's rule adds. "NV" and "NV#" forms such as
// "NV18" give LevelNV.
func ParseLevel(s string) (Level, error) {
	if strings.TrimSpace(s) == "P2C" {
		return LevelP2C, nil
	}
	l, err := ParseLink(s)
	return l.Level, err
}

// GPUDirectCapable reports whether NCCL, at its defaults, uses GPUDirect
// RDMA between a GPU and a NIC at this decision level: PIX, PXB or P2C
// (docs/levels.md, "Aligned: NCCL's rule").
func (l Level) GPUDirectCapable() bool { return l >= LevelPIX && l <= LevelP2C }

// Link is one cell of the topology matrix.
type Link struct {
	Level Level
	// NVLinks is the number of bonded NVLinks; set only when Level is LevelNV.
	NVLinks int
}

func (k Link) String() string {
	if k.Level == LevelNV {
		if k.NVLinks <= 0 {
			return "NV#" // NVLink of unknown width
		}
		return "NV" + strconv.Itoa(k.NVLinks)
	}
	return k.Level.String()
}

// ParseLink reads a matrix cell as nvidia-smi prints it: X, NV<n>, PIX, PXB, PHB, NODE or SYS.
func ParseLink(s string) (Link, error) {
	t := strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(t, "NV"); ok {
		if rest == "" || rest == "#" {
			return Link{Level: LevelNV}, nil
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n <= 0 {
			return Link{}, fmt.Errorf("topology level %.64q: NVLink count must be a positive number", s)
		}
		return Link{Level: LevelNV, NVLinks: n}, nil
	}
	for l, name := range levelNames {
		if t == name && Level(l) != LevelNV && Level(l) != LevelP2C {
			return Link{Level: Level(l)}, nil
		}
	}
	return Link{}, fmt.Errorf("topology level %.64q: want one of X, NV#, PIX, PXB, PHB, NODE, SYS", s)
}

// MarshalText writes the nvidia-smi spelling, so JSON carries "PIX", "NV18".
func (k Link) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText is the inverse of MarshalText.
func (k *Link) UnmarshalText(b []byte) error {
	l, err := ParseLink(string(b))
	if err != nil {
		return err
	}
	*k = l
	return nil
}
