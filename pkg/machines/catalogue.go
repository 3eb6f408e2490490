// Package machines is the catalogue of machine shapes nicaffinity ships,
// one name each, read by the CLI (`topo --machine`, `dra claims`), the
// simulator's cluster specs and the tests:
//   - sysfs shapes, written as real sysfs trees (Tree) and read by the real
//     sysfs reader, each after a real machine whose `nvidia-smi topo -m` was
//     published (Machines) or a shape nicaffinity is about (HalfNICs);
//   - the NCCL topology dumps of pkg/profiles, named profile/<name>.
//
// Tests build their own trees with Tree; machinestest keeps only builders of
// broken and test-only shapes.
package machines

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/profiles"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// ProfilePrefix names the NCCL XML profiles in the catalogue.
const ProfilePrefix = "profile/"

// Shapes are the sysfs shapes of the catalogue: the published machines and
// the shapes nicaffinity is about.
var Shapes = append(slices.Clone(Machines),
	Machine{Name: "half-nic-8gpu-2nic", GPUs: 8, Build: HalfNICs},
	Machine{Name: "h20-3e-8gpu-11nic-sriov", GPUs: 8, NVLinks: 18, Build: H20SRIOV},
	Machine{Name: "gb200-tray-4gpu-8nic", GPUs: 4, NVLinks: 18, Build: GB200Tray},
	Machine{Name: "gh200-1gpu-4nic", GPUs: 1, Build: GH200},
	Machine{Name: "hgx-b300-8gpu-8nic-cx8", GPUs: 8, NVLinks: 18, Build: HGXB300},
	Machine{Name: "gb300-tray-4gpu-4nic-cx8-datadirect", GPUs: 4, NVLinks: 18, Build: GB300DataDirect},
)

// Lookup finds a sysfs shape by name.
func Lookup(name string) (Machine, bool) {
	for _, m := range Shapes {
		if m.Name == name {
			return m, true
		}
	}
	return Machine{}, false
}

// ShapeNames are the names of the sysfs shapes, sorted.
func ShapeNames() []string {
	var out []string
	for _, m := range Shapes {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// Names are every name the catalogue knows: the sysfs shapes, then the
// profiles as profile/<name>.
func Names() []string {
	out := ShapeNames()
	for _, p := range profiles.Names() {
		out = append(out, ProfilePrefix+p)
	}
	return out
}

// Load reads a machine of the catalogue by name: a sysfs shape through the
// real sysfs reader, from a tree built in memory (nothing is written to
// disk), or a profile through the NCCL XML importer.
func Load(name string) (*topology.Topology, error) {
	if p, ok := strings.CutPrefix(name, ProfilePrefix); ok {
		return profiles.Load(p)
	}
	m, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("unknown machine %q: want one of %s, or %s<name> (%s)", name, strings.Join(ShapeNames(), ", "),
			ProfilePrefix, strings.Join(profiles.Names(), ", "))
	}
	return Discover("", m.Build)
}
