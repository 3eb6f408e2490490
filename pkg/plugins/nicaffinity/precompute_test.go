//go:build !race

package nicaffinity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestPrecomputedAnswersEveryShape holds precompute (one pick sequence
// per level, running packing counts) to the search it replaces (feasible,
// nodeScore), answer by answer: every sysfs shape of the catalogue and the
// H20 with free and used VFs (which move plan's and packing's VF keepers),
// GPUs used by the object and reserved by the cache, every default level
// and both strategies.
func TestPrecomputedAnswersEveryShape(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var objs []*v1alpha2.NodeResourceTopology
	for _, m := range machines.Shapes {
		for i := range 6 {
			var used []int
			for g := range m.GPUs {
				if i > 0 && rng.IntN(3) == 0 {
					used = append(used, g)
				}
			}
			objs = append(objs, machineNRT(t, fmt.Sprintf("%s-%d", m.Name, i), m.Build, used...))
		}
	}
	for i, vfs := range [][2]int{{2, 2}, {0, 1}, {1, 0}, {0, 0}} {
		o := sriovNRTFor(t, vfs[0], vfs[1])
		o.Name = fmt.Sprint("h20-vfs-", i)
		objs = append(objs, o)
	}
	checked := 0
	for _, level := range []topology.Level{topology.LevelPIX, topology.LevelPXB, topology.LevelP2C, topology.LevelPHB, topology.LevelSYS} {
		for _, strategy := range []string{StrategyBalanced, StrategyMostAligned} {
			pl, st := newTestPlugin(t, func(a *Args) { a.ScoringStrategy.Type, a.DefaultMaxLevel = strategy, level.String() }, objs...)
			for i, o := range objs {
				// Reserve a random GPU or two on some nodes: views built
				// by Reserve carry answers too.
				if v, _ := st.View(o.Name); v != nil && i%2 == 1 && v.Free != 0 {
					var take nrt.GPUSet
					for g := range v.C.GPUs {
						if v.Free&(1<<g) != 0 && rng.IntN(2) == 0 {
							take |= 1 << g
						}
					}
					st.Reserve(o.Name, types.UID(o.Name), take, nil)
				}
				v, _ := st.View(o.Name)
				if v == nil {
					t.Fatalf("%s: no usable view", o.Name)
				}
				if want := min(len(v.C.GPUs), maxAnswered); want > 1 && v.answered != want {
					t.Fatalf("%s: %d answers for %d GPUs", o.Name, v.answered, len(v.C.GPUs))
				}
				for g := 1; g < v.answered; g++ {
					for _, rdma := range []bool{true, false} {
						req := &request{GPUs: g, RDMA: rdma, MaxLevel: level, Required: true, Common: true}
						a := v.answers[g]
						got := int64(a.plain)
						if rdma {
							got = int64(a.score)
							if want := v.fits(req, placement.LevelIndex(level)); a.feasible != want {
								t.Errorf("%s, %s, %s, %d GPUs: precomputed feasible %v, search %v", level, strategy, o.Name, g, a.feasible, want)
							}
						}
						if want := pl.scoreOf(v, req); got != want {
							t.Errorf("%s, %s, %s, %d GPUs, rdma %v: precomputed score %d, search %d (free %b)", level, strategy, o.Name, g, rdma, got, want, v.Free)
						}
						checked++
					}
				}
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d answers checked", checked)
	}
}
