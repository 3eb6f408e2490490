package nicaffinity

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// overlay is what preemption's what-if changes on one node: the GPUs the
// pods it removes would free, and the GPUs the pods it adds (nominated
// pods) would take. Filter reads the node's free GPUs through it.
type overlay struct {
	freed, taken nrt.GPUSet
}

// PreFilterExtensions lets DefaultPreemption see aligned GPUs that evicting
// lower-priority pods would free: RemovePod and AddPod change the cycle's
// state, never the cache.
func (pl *NICAffinity) PreFilterExtensions() fwk.PreFilterExtensions { return pl }

// AddPod counts the GPUs an added pod holds on the node as taken.
func (pl *NICAffinity) AddPod(_ context.Context, cycle fwk.CycleState, _ *v1.Pod, add fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	return pl.change(cycle, add.GetPod(), nodeInfo, false)
}

// RemovePod counts the GPUs a removed pod holds on the node as free.
func (pl *NICAffinity) RemovePod(_ context.Context, cycle fwk.CycleState, _ *v1.Pod, remove fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	return pl.change(cycle, remove.GetPod(), nodeInfo, true)
}

func (pl *NICAffinity) change(cycle fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo, remove bool) *fwk.Status {
	s, err := getState(cycle)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s == nil || nodeInfo.Node() == nil {
		return nil
	}
	node := nodeInfo.Node().Name
	v, _ := usable(pl.cache.view(node))
	if v == nil {
		return nil
	}
	gpus := heldGPUs(v.C, pod, node)
	if gpus == 0 {
		return nil
	}
	if s.overlays == nil {
		s.overlays = map[string]overlay{}
	}
	o := s.overlays[node]
	if remove {
		o.freed |= gpus
		o.taken &^= gpus
	} else {
		o.taken |= gpus
		o.freed &^= gpus
	}
	s.overlays[node] = o
	return nil
}

// heldGPUs are the GPUs of c a pod holds on node: those the exporter
// observed it holding, else those of its plan. A pod with neither (placed
// by another scheduler and not yet observed) holds GPUs nobody can name:
// none are counted, so preemption never counts on them.
func heldGPUs(c *nrt.Compiled, pod *v1.Pod, node string) nrt.GPUSet {
	busIDs := observedGPUs(pod)
	if busIDs == nil {
		if s, ok := pod.Annotations[annotations.AllocationKey]; ok {
			if p, err := annotations.ParseAllocation(s); err == nil && p.Node == node {
				busIDs = p.GPUs
			}
		}
	}
	return busSet(c, busIDs)
}

// busSet is the set of c's GPUs with the given PCI addresses (in any
// spelling NormalizeBusID reads; others are ignored).
func busSet(c *nrt.Compiled, busIDs []string) nrt.GPUSet {
	var set nrt.GPUSet
	for _, id := range busIDs {
		addr, err := topology.NormalizeBusID(id)
		if err != nil {
			continue
		}
		for g := range c.GPUs {
			if c.GPUs[g].BusID == addr {
				set |= 1 << g
			}
		}
	}
	return set
}

// observedGPUs are the bus IDs of the GPUs the exporter observed pod
// holding (nil without a readable observation). Only the exporter of the
// pod's node can write the annotation (docs/security.md).
func observedGPUs(pod *v1.Pod) []string {
	s, ok := pod.Annotations[annotations.ObservedKey]
	if !ok {
		return nil
	}
	o, err := annotations.ParseObserved(s)
	if err != nil {
		return nil
	}
	var busIDs []string
	for _, g := range o.GPUs {
		busIDs = append(busIDs, g.BusID)
	}
	return busIDs
}

// withOverlay is v as preemption's what-if sees it: its free GPUs changed,
// and no precomputed answers, which are for the real free set.
func (v *nodeView) withOverlay(o overlay) *nodeView {
	w := *v
	w.Free = (v.Free | (o.freed & v.C.Healthy)) &^ o.taken
	w.answered = 0
	return &w
}
