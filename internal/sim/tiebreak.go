package sim

import (
	"cmp"
	"context"
	"hash/fnv"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// The simulator's scheduler breaks ties deterministically. kube-scheduler
// picks at random among the nodes of the highest score (selectHost), so
// two replays of one workload would place jobs differently whenever two
// nodes tie, which on a cluster of identical machines is most of the time.
//
// Two score plugins, registered only here, rank the feasible nodes of a pod
// by a hash of the pod's and the node's names: the rank's two base-101
// digits, one plugin each, weighted 101 and 1, so that together they add a
// number from 0 to 10200 that differs between any two nodes (up to 10201 of
// them: the spec caps a cluster at 2000). Every other score weight is
// multiplied by tieBreakScale = 10201, so the tie-break decides only
// between nodes the real plugins score exactly alike: the order of any two
// nodes that differ in the real score is unchanged.
const (
	tieBreakHigh  = "SimTieBreakHigh"
	tieBreakLow   = "SimTieBreakLow"
	tieBreakBase  = 101
	tieBreakScale = tieBreakBase * tieBreakBase
)

type tieBreak struct {
	name  string
	digit int // 1: rank / 101, 0: rank % 101
}

var (
	_ fwk.PreScorePlugin = (*tieBreak)(nil)
	_ fwk.ScorePlugin    = (*tieBreak)(nil)
)

func (t *tieBreak) Name() string { return t.name }

type tieBreakState struct{ rank map[string]int }

func (s *tieBreakState) Clone() fwk.StateData { return s }

func tieHash(pod *v1.Pod, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(pod.Namespace + "/" + pod.Name))
	h.Write([]byte{0})
	h.Write([]byte(node))
	return h.Sum64()
}

// PreScore ranks the feasible nodes: the order of the hashes, names
// breaking equal hashes.
func (t *tieBreak) PreScore(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	type ranked struct {
		name string
		hash uint64
	}
	order := make([]ranked, 0, len(nodes))
	for _, n := range nodes {
		order = append(order, ranked{n.Node().Name, tieHash(pod, n.Node().Name)})
	}
	slices.SortFunc(order, func(a, b ranked) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	rank := make(map[string]int, len(order))
	for i, n := range order {
		rank[n.name] = i
	}
	state.Write(fwk.StateKey(t.name), &tieBreakState{rank: rank})
	return nil
}

func (t *tieBreak) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, node fwk.NodeInfo) (int64, *fwk.Status) {
	d, err := state.Read(fwk.StateKey(t.name))
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	r := int64(d.(*tieBreakState).rank[node.Node().Name])
	if t.digit == 1 {
		return (r / tieBreakBase) % tieBreakBase, nil
	}
	return r % tieBreakBase, nil
}

func (t *tieBreak) ScoreExtensions() fwk.ScoreExtensions { return nil }

// tieBreakPlugins registers the two plugins.
func tieBreakPlugins() frameworkruntime.Registry {
	factory := func(name string, digit int) frameworkruntime.PluginFactory {
		return func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return &tieBreak{name: name, digit: digit}, nil
		}
	}
	return frameworkruntime.Registry{tieBreakHigh: factory(tieBreakHigh, 1), tieBreakLow: factory(tieBreakLow, 0)}
}

// deterministicProfiles makes every profile of a completed configuration
// decide by the state alone: every node is scored (with fewer, which nodes
// are scored depends on which filter goroutines finish first), and ties are
// broken by the plugins above.
func deterministicProfiles(c *schedulerapi.KubeSchedulerConfiguration) error {
	all := int32(100)
	c.PercentageOfNodesToScore = &all
	for i := range c.Profiles {
		p := &c.Profiles[i]
		p.PercentageOfNodesToScore = nil
		for _, set := range []*schedulerapi.PluginSet{&p.Plugins.MultiPoint, &p.Plugins.Score} {
			for j := range set.Enabled {
				set.Enabled[j].Weight = max(set.Enabled[j].Weight, 1) * tieBreakScale
			}
		}
		p.Plugins.PreScore.Enabled = append(p.Plugins.PreScore.Enabled, schedulerapi.Plugin{Name: tieBreakHigh}, schedulerapi.Plugin{Name: tieBreakLow})
		p.Plugins.Score.Enabled = append(p.Plugins.Score.Enabled, schedulerapi.Plugin{Name: tieBreakHigh, Weight: tieBreakBase}, schedulerapi.Plugin{Name: tieBreakLow, Weight: 1})
	}
	return nil
}
