package nicaffinity

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

const stateKey fwk.StateKey = "PreFilter" + Name

// preFilterState is the pod's request, computed once per scheduling cycle.
type preFilterState struct {
	req request
	// planned is filled by Reserve for PreBind.
	planned *annotations.Allocation
	// overlays are preemption's what-if changes per node (AddPod,
	// RemovePod); nil outside preemption.
	overlays map[string]overlay
	// filterSkipped: PreFilter returned Skip because Filter would pass
	// every node NodeResourcesFit passes (skip.go); Reserve checks the
	// chosen node.
	filterSkipped bool
	// wait is how long the pod waits for aligned GPUs (policy bounded).
	wait time.Duration
	// turnedDown is set by the first Filter call of the cycle that turns
	// a node down, which notes the pod (waits.go); shared by clones,
	// since Filter runs on many nodes at once.
	turnedDown *atomic.Bool
}

// Clone shares the request, which nothing changes after PreFilter; the plan
// and preemption's overlays belong to one cycle and are copied so clones
// made for preemption cannot write into each other.
func (s *preFilterState) Clone() fwk.StateData {
	c := *s
	if s.planned != nil {
		p := *s.planned
		c.planned = &p
	}
	if s.overlays != nil {
		c.overlays = make(map[string]overlay, len(s.overlays))
		for k, o := range s.overlays {
			c.overlays[k] = o
		}
	}
	return &c
}

// podRequest reads what the pod asks for through the one reader the
// plugin, kubectl and doctor share (pkg/request). ok is false without
// GPUs. The error is a bad annotation, named.
func (pl *NICAffinity) podRequest(pod *v1.Pod) (*request, bool, error) {
	req, _, ok, err := pl.readRequest(pod)
	return req, ok, err
}

// readRequest is podRequest with how long the pod waits for aligned GPUs
// (policy bounded; 0 for other pods).
func (pl *NICAffinity) readRequest(pod *v1.Pod) (*request, time.Duration, bool, error) {
	r, ok, err := podreq.Read(pod, pl.reader)
	if err != nil || !ok {
		return nil, 0, false, err
	}
	req := placement.FromPod(r, pl.reader)
	return &req, r.Wait, true, nil
}

// PreFilter computes the request. Pods without GPUs, and pods without RDMA
// that take at least every GPU of the largest node, are skipped: the GPUs
// of a whole node are all theirs. A whole-node pod that needs RDMA is not:
// on a node with fewer NICs than GPUs some of its GPUs lose GPUDirect, so
// Filter applies its level to every GPU and Score prefers nodes where every
// GPU has its NIC.
func (pl *NICAffinity) PreFilter(_ context.Context, cycle fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	req, wait, ok, err := pl.readRequest(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if !ok || !req.RDMA && takesLargestNode(nodes, v1.ResourceName(pl.args.GPUResourceName), int64(req.GPUs)) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if req.Bounded && req.Required && pl.relaxed(cycle, pod, req, nodes) {
		// Its wait for aligned GPUs is over, or no node could end it
		// (unalignable.go): placed as preferred.
		req.Required, req.Common = false, false
	}
	if req.FollowRails {
		// The rails the job's pods hold now: in a pod-group cycle, those
		// of the members reserved before this one.
		req.JobRails = pl.cache.jobs.rails(req.Job)
	}
	st := &preFilterState{req: *req, wait: wait, turnedDown: &atomic.Bool{}}
	if req.RDMA && cycle.IsPodGroupSchedulingCycle() {
		st.overlays = pl.removedOverlays(nodes)
	}
	// Score, Reserve and PreBind read the state of a skipped Filter too.
	st.filterSkipped = pl.canSkipFilter(cycle, pod.UID, st, nodes)
	cycle.Write(stateKey, st)
	if st.filterSkipped {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return pl.vfCandidates(req)
}

// relaxed reports whether the wait of the pod's job is over, or whether no
// node of the cluster could ever align the pod, so that waiting is in vain.
// A pod-group cycle asks once for the whole group (the answer is kept in
// the placement's cycle state), so a gang whose wait ends mid-cycle is not
// split: its members are placed alike.
func (pl *NICAffinity) relaxed(cycle fwk.CycleState, pod *v1.Pod, req *request, nodes []fwk.NodeInfo) bool {
	ask := func() bool {
		return pl.waits.over(pod, req.Job) || pl.cache.unalignable(req) && pl.covered(nodes)
	}
	ps := cycle.GetPlacementCycleState()
	if ps == nil || req.Job == "" {
		return ask()
	}
	if d, err := ps.Read(relaxKey); err == nil {
		if r, ok := d.(*relaxState); ok {
			return r.over
		}
	}
	r := &relaxState{over: ask()}
	ps.Write(relaxKey, r)
	return r.over
}

const relaxKey fwk.StateKey = "Relax" + Name

// relaxState is a pod group's answer to relaxed for one placement.
type relaxState struct{ over bool }

// Clone: the answer never changes once given.
func (r *relaxState) Clone() fwk.StateData { return r }

// vfCandidates narrows a required VF pod's nodes to those offering its VF
// resources (nodeset.go); nil for every other pod (all nodes). With
// several VF resources it is the smallest of their sets, a superset of the
// nodes that offer them all.
func (pl *NICAffinity) vfCandidates(req *request) (*fwk.PreFilterResult, *fwk.Status) {
	if len(req.VFs) == 0 || !req.RDMA || !req.Required || pl.args.MissingTopology != MissingReject {
		return nil, nil
	}
	var smallest sets.Set[string]
	for i, vf := range req.VFs {
		s := pl.cache.vfNodes(vf.Resource)
		if s.Len() == 0 {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("no node's NodeResourceTopology offers VFs of %s", vf.Resource))
		}
		if i == 0 || s.Len() < smallest.Len() {
			smallest = s
		}
	}
	return &fwk.PreFilterResult{NodeNames: smallest}, nil
}

// takesLargestNode: the pod asks for at least as many GPUs as the largest
// node has (and some node has GPUs). The scan stops at the first node with
// more, so the common pod costs one lookup, not one per node of the cluster.
func takesLargestNode(nodes []fwk.NodeInfo, gpu v1.ResourceName, want int64) bool {
	seen := false
	for _, n := range nodes {
		if q, ok := n.GetAllocatable().GetScalarResources()[gpu]; ok {
			if q > want {
				return false
			}
			seen = seen || q > 0
		}
	}
	return seen
}

// getState reads the pod's state. nil without an error when PreFilter
// skipped the pod: Score, Reserve and PreBind are still called for it.
func getState(cycle fwk.CycleState) (*preFilterState, error) {
	d, err := cycle.Read(stateKey)
	if errors.Is(err, fwk.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycle state: %w", stateKey, err)
	}
	s, ok := d.(*preFilterState)
	if !ok {
		return nil, fmt.Errorf("%+v cannot be converted to *preFilterState", d)
	}
	return s, nil
}
