package nicaffinity

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// removedOverlays lets a pod group preempt its way to aligned GPUs. 1.37's
// pod-group preemption (DefaultPreemption's PodGroupPostFilter) takes its
// candidate victims out of the scheduler's snapshot and then runs the
// whole group, PreFilter to Reserve, on fresh cycle states; it calls
// PreFilterExtensions only when it puts victims back. The plugin reads its
// own cache, in which the victims still hold their GPUs, so in a pod-group
// cycle PreFilter finds, per node, the pods the apiserver has there that
// the snapshot lacks, and frees in the cycle's state what they hold, as
// RemovePod would.
//
// Work per call: one view and one requested-GPU lookup per node; pods are
// listed only on nodes whose snapshot requests fewer GPUs than the node's
// view has in use, which is where pods were taken out (or the object has
// not caught up with a deletion: then the apiserver no longer has the pod
// either, and nothing is freed).
func (pl *NICAffinity) removedOverlays(nodes []fwk.NodeInfo) map[string]overlay {
	if pl.feed == nil || pl.feed.pods == nil {
		return nil
	}
	gpu := v1.ResourceName(pl.args.GPUResourceName)
	var out map[string]overlay
	for _, ni := range nodes {
		n := ni.Node()
		if n == nil {
			continue
		}
		v, _ := usable(pl.cache.view(n.Name))
		if v == nil {
			continue
		}
		if ni.GetRequested().GetScalarResources()[gpu] >= int64((v.C.Healthy &^ v.Free).Count()) {
			continue
		}
		if freed := pl.freedOn(ni, v); freed != 0 {
			if out == nil {
				out = map[string]overlay{}
			}
			out[n.Name] = overlay{freed: freed}
		}
	}
	return out
}

// freedOn is what the pods the apiserver has on the node, and the snapshot
// does not, hold (observed, else planned: heldCache), less every GPU this
// scheduler has reserved there (an earlier member of the group may have
// planned onto a victim's GPUs already). Pods that ended are left out:
// their GPUs show free once the node's object catches up.
func (pl *NICAffinity) freedOn(ni fwk.NodeInfo, v *nodeView) nrt.GPUSet {
	node := ni.Node().Name
	objs, err := pl.feed.pods.ByIndex(nodeNameIndex, node)
	if err != nil {
		return 0
	}
	in := make(map[types.UID]bool, len(ni.GetPods()))
	for _, p := range ni.GetPods() {
		in[p.GetPod().UID] = true
	}
	var freed nrt.GPUSet
	for _, o := range objs {
		p, ok := o.(*v1.Pod)
		if !ok || in[p.UID] || podutil.IsPodTerminal(p) {
			continue
		}
		freed |= pl.held.gpus(v.C, p, node)
	}
	return freed &^ pl.cache.reservedGPUs(node)
}
