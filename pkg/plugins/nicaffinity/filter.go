package nicaffinity

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// Filter passes a node when some set of its free GPUs each has a usable NIC
// at the pod's level or closer (with free VFs where the pod asks for VFs):
// a joint search over GPUs and NICs, not GPU-first greedy.
func (pl *NICAffinity) Filter(_ context.Context, cycle fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := getState(cycle)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s == nil {
		return nil
	}
	st := pl.filterNode(s, nodeInfo.Node().Name)
	if st != nil && pod != nil && s.turnedDown != nil && s.turnedDown.CompareAndSwap(false, true) {
		// The pod waits for aligned GPUs from now, if it did not already.
		pl.waits.note(pod, s.req.Job, s.req.GPUs, s.wait)
	}
	return st
}

// filterNode is Filter's verdict on the node named node.
func (pl *NICAffinity) filterNode(s *preFilterState, node string) *fwk.Status {
	req := &s.req
	if !req.RDMA || !req.Required {
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
	if req.GPUs > len(v.C.GPUs) {
		return nil // more than the node has: NodeResourcesFit says so
	}
	if v.stale && pl.args.StaleTopology == StaleReject {
		pl.cache.metrics.reject(reasonLagging)
		return fwk.NewStatus(fwk.Unschedulable, "NodeResourceTopology has not caught up with pods placed on this node yet")
	}
	if v.foreign != "" {
		// Another scheduler's pod takes GPUs here that the object does
		// not show yet: a plan now could name them. The next object
		// requeues the pod (EventsToRegister).
		pl.cache.metrics.reject(reasonLagging)
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("NodeResourceTopology has not counted the GPUs of %s (another scheduler's pod) yet", v.foreign))
	}
	steps := placement.MaxCallSteps
	return pl.filterView(v, req, &steps)
}

// filterView is Filter on a usable view, within the call's search budget
// *steps (one budget for the whole call: the fit and the rejection's
// reasons): placement decides, from the view's precomputed answer when it
// has one; the plugin counts and words the status.
func (pl *NICAffinity) filterView(v *nodeView, req *request, steps *int) *fwk.Status {
	var verdict placement.Verdict
	if a, ok := v.commonAnswer(req); ok {
		if a.feasible {
			return nil
		}
		verdict = placement.Reject(&v.Node, req, steps)
	} else if verdict = placement.Fit(&v.Node, req, steps); verdict.Fits {
		return nil
	}
	pl.cache.metrics.reject(verdict.Reason)
	code := fwk.Unschedulable
	if verdict.Unresolvable {
		code = fwk.UnschedulableAndUnresolvable
	}
	return fwk.NewStatus(code, verdict.Message)
}
