package nicaffinity

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Filter passes a node when some set of its free GPUs each has a usable NIC
// at the pod's level or closer (with free VFs where the pod asks for VFs):
// a joint search over GPUs and NICs, not GPU-first greedy.
func (pl *NICAffinity) Filter(_ context.Context, cycle fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := getState(cycle)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s == nil {
		return nil
	}
	req := &s.req
	if !req.rdma || !req.required {
		return nil // only scored: every node passes
	}
	v, why := pl.cache.View(nodeInfo.Node().Name)
	if v == nil {
		if pl.args.MissingTopology == MissingIgnore {
			return nil
		}
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
	}
	if req.gpus > len(v.c.GPUs) {
		return nil // more than the node has: NodeResourcesFit says so
	}
	if v.stale && pl.args.StaleTopology == StaleReject {
		return fwk.NewStatus(fwk.Unschedulable, "NodeResourceTopology has not caught up with pods placed on this node yet")
	}
	li := levelIndex(req.maxLevel)
	if a, ok := v.commonAnswer(req); ok {
		if a.feasible {
			return nil
		}
	} else if v.feasible(req, li) {
		return nil
	}
	return pl.rejection(v, req, li)
}

func (pl *NICAffinity) rejection(v *nodeView, req *request, li int) *fwk.Status {
	level := topology.Levels[li]
	free := v.free.Count()
	near := (v.free & v.c.AnyNear[li]).Count()
	empty := &nodeView{c: v.c, free: v.c.Healthy, vfFree: v.vfFree}
	code := fwk.Unschedulable
	if !empty.feasible(req, li) && len(req.vfs) == 0 {
		code = fwk.UnschedulableAndUnresolvable
	}
	switch {
	// The scheduler prints "<node count> <reason>": reasons start with a word.
	case len(req.vfs) > 0 && near >= req.gpus:
		return fwk.NewStatus(code, fmt.Sprintf("no free VF of %s on a NIC at %s or closer to %d free GPUs", req.vfs[0].resource, level, req.gpus))
	case near == 0:
		return fwk.NewStatus(code, fmt.Sprintf("none of the %d free GPUs has a NIC at %s or closer", free, level))
	default:
		return fwk.NewStatus(code, fmt.Sprintf("only %d of the %d free GPUs have a NIC at %s or closer; the pod needs %d", near, free, level, req.gpus))
	}
}
