package nicaffinity

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
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
	gpus := pl.held.gpus(v.C, pod, node)
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

// withOverlay is v as preemption's what-if sees it: its free GPUs changed,
// and no precomputed answers, which are for the real free set.
func (v *nodeView) withOverlay(o overlay) *nodeView {
	w := *v
	w.Free = (v.Free | (o.freed & v.C.Healthy)) &^ o.taken
	w.answered = 0
	return &w
}
