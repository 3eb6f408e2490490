package nicaffinity

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
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
	return pl.filterNode(s, nodeInfo.Node().Name)
}

// filterNode is Filter's verdict on the node named node.
func (pl *NICAffinity) filterNode(s *preFilterState, node string) *fwk.Status {
	req := &s.req
	if !req.rdma || !req.required {
		return nil // only scored: every node passes
	}
	raw := pl.cache.view(node)
	v, why := usable(raw)
	if v == nil {
		if pl.args.MissingTopology == MissingIgnore {
			return nil
		}
		pl.cache.metrics.reject(unusableReason(raw))
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
	}
	if o, ok := s.overlays[node]; ok {
		v = v.withOverlay(o)
	}
	if req.gpus > len(v.c.GPUs) {
		return nil // more than the node has: NodeResourcesFit says so
	}
	if v.stale && pl.args.StaleTopology == StaleReject {
		pl.cache.metrics.reject(reasonLagging)
		return fwk.NewStatus(fwk.Unschedulable, "NodeResourceTopology has not caught up with pods placed on this node yet")
	}
	steps := maxCallSteps
	return pl.filterView(v, req, &steps)
}

// filterView is Filter on a usable view, within the call's search budget
// *steps (one budget for the whole call: the fit and the rejection's
// reasons).
func (pl *NICAffinity) filterView(v *nodeView, req *request, steps *int) *fwk.Status {
	li := levelIndex(req.maxLevel)
	if a, ok := v.commonAnswer(req); ok {
		if a.feasible {
			return nil
		}
	} else if v.feasible(req, li, steps) {
		if req.rails != annotations.PolicyRequired || v.railsFit(req, li) {
			return nil
		}
		pl.cache.metrics.reject(reasonRails)
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("not enough free GPUs at %s or closer on the rails of the pod's job (%s; nicaffinity.io/rails: required)",
			v.c.Shown(topology.Levels[li]), strings.Join(req.jobRails, ", ")))
	}
	return pl.rejection(v, req, li, steps)
}

func (pl *NICAffinity) rejection(v *nodeView, req *request, li int, steps *int) *fwk.Status {
	level := topology.Levels[li]
	free := v.free.Count()
	near := (v.free & v.c.AnyNear[li]).Count()
	empty := &nodeView{c: v.c, free: v.c.Healthy, vfFree: v.vfFree}
	code := fwk.Unschedulable
	// Only pods without VFs can be unresolvable here (VFs free up when
	// pods go), and their check searches nothing.
	if len(req.vfs) == 0 && !empty.feasible(req, li, steps) {
		code = fwk.UnschedulableAndUnresolvable
	}
	cause := blockedCause(v, level)
	shown := v.c.Shown(level).String() + " or closer"
	if req.nccl != "" {
		shown += " (the pod's " + req.nccl + ")"
	}
	reason := reasonTooFew
	switch {
	case cause != "":
		reason = reasonNoGPUDirect
	case len(req.vfs) > 0 && near >= req.gpus:
		reason = reasonNoVF
	case near == 0:
		reason = reasonNoAligned
	}
	pl.cache.metrics.reject(reason)
	switch {
	// The scheduler prints "<node count> <reason>": reasons start with a word.
	case len(req.vfs) > 0 && near >= req.gpus:
		return fwk.NewStatus(code, fmt.Sprintf("no free VF of %s on a NIC at %s to %d free GPUs%s", req.vfs[0].resource, shown, req.gpus, cause))
	case near == 0:
		return fwk.NewStatus(code, fmt.Sprintf("none of the %d free GPUs has a NIC at %s%s", free, shown, cause))
	default:
		return fwk.NewStatus(code, fmt.Sprintf("only %d of the %d free GPUs have a NIC at %s; the pod needs %d%s", near, free, shown, req.gpus, cause))
	}
}

// blockedCause names why GPUDirect RDMA cannot run on paths of free GPUs
// whose published level would have been close enough: "; GPUDirect RDMA
// impossible on closer paths: ACS redirect on 0000:14:00.0". Empty when no
// such path exists. Only rejections call it.
func blockedCause(v *nodeView, level topology.Level) string {
	var reasons []string
	for g := range v.c.GPUs {
		gpu := &v.c.GPUs[g]
		if v.free&(1<<g) == 0 || gpu.Blocked == nil {
			continue
		}
		for n, why := range gpu.Blocked {
			if why != "" && gpu.Published[n] <= level && !slices.Contains(reasons, why) {
				reasons = append(reasons, why)
			}
		}
	}
	switch {
	case len(reasons) == 0:
		return ""
	case len(reasons) > 2:
		reasons = append(reasons[:2], fmt.Sprintf("%d more", len(reasons)-2))
	}
	return "; GPUDirect RDMA impossible on closer paths: " + strings.Join(reasons, ", ")
}
