package sim

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// describeTest is describe with the bound's capacity asked of placement.
func describeTest(t *testing.T, name string, topo *topology.Topology) nodeInfo {
	t.Helper()
	caps, err := boundCapacity(name, topo)
	if err != nil {
		t.Fatal(err)
	}
	return describe(name, topo, caps)
}

// TestBoundCapacityAgreesWithLevels: for every machine of the catalogue,
// what the bound counts as the placement package answers it (the compiled
// object, at the plugin's default level) is what the machine's own decision
// levels say: GPUs with a GPUDirect-capable NIC, and per NIC with VFs the
// GPUs at such a level to it. So the bound and the plugin cannot disagree
// on what can be aligned.
func TestBoundCapacityAgreesWithLevels(t *testing.T) {
	for _, name := range machines.Names() {
		t.Run(name, func(t *testing.T) {
			topo, err := machines.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			got, err := boundCapacity(name, topo)
			if err != nil {
				t.Fatal(err)
			}
			align := topo.AlignLevels()
			want := capacity{}
			offered := map[string]bool{}
			for i, g := range topo.GPUs {
				// A device plugin offers one device per bus ID: a dump of
				// two trays in one file (profile/oci-gb300-2x4gpu-cx8vf-
				// mnnvl) names each address twice, and a node offers it once.
				if offered[g.PCI.Address] {
					continue
				}
				offered[g.PCI.Address] = true
				for j, nic := range topo.NICs {
					if nic.PhysFn == "" && align[i][j].GPUDirectCapable() {
						want.alignable++
						break
					}
				}
			}
			for j, nic := range topo.NICs {
				if nic.PhysFn != "" || len(nic.VFs) == 0 {
					continue
				}
				near := 0
				for i := range topo.GPUs {
					if align[i][j].GPUDirectCapable() {
						near++
					}
				}
				want.vfGroups = append(want.vfGroups, near)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(capacity{})); diff != "" {
				t.Errorf("capacity (-levels,+placement):\n%s", diff)
			}
		})
	}
}
