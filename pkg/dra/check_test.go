package dra

import (
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/profiles"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func machine(t *testing.T, build func(*machines.Tree)) *topology.Topology {
	t.Helper()
	topo, err := machines.Discover(t.TempDir(), build)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestCheckShapes: the published shapes where sharing a root means PIX or
// PXB, and the half-NIC shape where 12 of the 16 same-root pairs are PHB.
func TestCheckShapes(t *testing.T) {
	for _, m := range machines.Machines {
		t.Run(m.Name, func(t *testing.T) {
			c := CheckTopology(m.Name, machine(t, m.Build), topology.LevelPXB)
			if !c.Known || !c.Enough || len(c.Unaligned) != 0 || c.SameRoot == 0 {
				t.Errorf("%s: %+v, want pcieRoot enough", m.Name, c)
			}
		})
	}
	t.Run("half-nic", func(t *testing.T) {
		c := CheckTopology("half-nic", machine(t, machines.HalfNICs), topology.LevelPXB)
		if c.Enough || c.SameRoot != 16 || len(c.Unaligned) != 12 {
			t.Fatalf("half-nic: %d same-root pairs, %d unaligned, enough %v; want 16, 12, false", c.SameRoot, len(c.Unaligned), c.Enough)
		}
		for _, p := range c.Unaligned {
			if p.Level != "PHB" || p.GPURoot != p.NICRoot {
				t.Errorf("unaligned pair %+v, want PHB on one root", p)
			}
		}
	})
	t.Run("NCCL XML profile", func(t *testing.T) {
		topo, err := profiles.Load(profiles.Names()[0])
		if err != nil {
			t.Fatal(err)
		}
		if c := CheckTopology("p", topo, topology.LevelPXB); c.Known || c.Enough || c.Why == "" {
			t.Errorf("an NCCL XML source: %+v, want unknown with the reason", c)
		}
	})
}

// TestCheckTopologyGrace: on a GB200 tray NCCL reaches each GPU's NICs at
// P2C, on other roots than the GPU's: pcieRoot is not enough, every GPU is
// stranded, and the check says P2C; at PXB the same tray has no aligned
// pair at all.
func TestCheckTopologyGrace(t *testing.T) {
	c := CheckTopology("gb200", machine(t, machines.GB200Tray), topology.LevelP2C)
	if c.Enough || len(c.Stranded) != 4 || len(c.Missed) != 8 || c.MaxLevel != "P2C" {
		t.Errorf("GB200 at P2C: enough %v, stranded %v, %d missed, level %s; want not enough, 4 stranded, 8 missed, P2C", c.Enough, c.Stranded, len(c.Missed), c.MaxLevel)
	}
	if c := CheckTopology("h100", machine(t, machines.HGXH100), topology.LevelP2C); !c.Enough || c.MaxLevel != "PXB" {
		t.Errorf("HGX H100 at P2C: enough %v, level %s; want enough, shown as PXB", c.Enough, c.MaxLevel)
	}
}
