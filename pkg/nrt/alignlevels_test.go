package nrt

import (
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestCompiledAgreesWithAlignLevels: for every machine of the catalogue,
// the object the exporter publishes, compiled as the scheduler compiles
// it, gives every GPU-NIC pair the level the machine's own decision levels
// do, and so calls it aligned (P2C or closer) exactly where they do (topology.AlignLevels: NCCL's C2C rule,
// and paths from a ConnectX-8 Data Direct function). The exporter's
// reports and the simulator's bound use those levels; the scheduler must
// decide by the same ones.
func TestCompiledAgreesWithAlignLevels(t *testing.T) {
	li, _ := LevelIndex(topology.LevelP2C)
	for _, name := range machines.Names() {
		t.Run(name, func(t *testing.T) {
			topo, err := machines.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			obj, _ := ObjectFor(name, topo, nil)
			c, err := Compile(obj, "nvidia.com/gpu")
			if err != nil {
				t.Fatal(err)
			}
			addrs := map[string]bool{}
			for _, g := range topo.GPUs {
				addrs[g.PCI.Address] = true
			}
			if len(addrs) < len(topo.GPUs) {
				// A dump of two trays in one file names each address twice;
				// no node publishes such an object, and its zones cannot be
				// matched to GPUs by address.
				t.Logf("%s: GPU addresses repeat; not a node's object", name)
				return
			}
			align := topo.AlignLevels()
			nicAt := map[string]int{}
			for j, nic := range topo.NICs {
				nicAt[nic.Name] = j
			}
			gpuAt := map[string]int{}
			for g := range c.GPUs {
				gpuAt[c.GPUs[g].BusID] = g
			}
			for i, g := range topo.GPUs {
				cg, ok := gpuAt[g.PCI.Address]
				if !ok {
					t.Fatalf("GPU %s not in the object", g.PCI.Address)
				}
				for n, nic := range c.NICs {
					j, ok := nicAt[nic.Name]
					if !ok {
						t.Fatalf("NIC %s not in the topology", nic.Name)
					}
					want := align[i][j] <= topology.LevelP2C
					if got := c.Near[li][n]&(1<<cg) != 0; got != want || c.GPUs[cg].Level[n] != align[i][j] {
						t.Errorf("GPU %s - %s: level %s in the object (aligned %v), %s by the topology (aligned %v)",
							g.PCI.Address, nic.Name, c.GPUs[cg].Level[n], got, align[i][j], want)
					}
				}
			}
		})
	}
}
