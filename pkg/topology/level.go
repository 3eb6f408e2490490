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
	LevelPHB:  "PHB",
	LevelNODE: "NODE",
	LevelSYS:  "SYS",
}

// Levels lists the PCIe levels a NIC can be at from a GPU, best first.
var Levels = []Level{LevelPIX, LevelPXB, LevelPHB, LevelNODE, LevelSYS}

func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// ParseLevel reads a level name as nvidia-smi prints it ("PIX", "NODE", ...).
// "NV" and "NV#" forms such as "NV18" give LevelNV.
func ParseLevel(s string) (Level, error) {
	l, err := ParseLink(s)
	return l.Level, err
}

// GPUDirectCapable reports whether NCCL, with its default NCCL_NET_GDR_LEVEL (PXB),
// uses GPUDirect RDMA between a GPU and a NIC at this level.
func (l Level) GPUDirectCapable() bool { return l >= LevelPIX && l <= LevelPXB }

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
			return Link{}, fmt.Errorf("topology level %q: NVLink count must be a positive number", s)
		}
		return Link{Level: LevelNV, NVLinks: n}, nil
	}
	for l, name := range levelNames {
		if t == name && Level(l) != LevelNV {
			return Link{Level: Level(l)}, nil
		}
	}
	return Link{}, fmt.Errorf("topology level %q: want one of X, NV#, PIX, PXB, PHB, NODE, SYS", s)
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
