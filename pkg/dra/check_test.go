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
