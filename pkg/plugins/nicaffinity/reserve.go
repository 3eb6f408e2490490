package nicaffinity

import (
	"context"
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// Reserve picks the GPUs and NICs for the pod on the chosen node and holds
// them in the cache until the node's object shows them, so a burst of pods
// never plans the same GPU twice.
func (pl *NICAffinity) Reserve(ctx context.Context, cycle fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	s, err := getState(cycle)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s == nil {
		return nil // skipped in PreFilter: nothing to plan
	}
	if st := pl.skippedFilterHolds(s, pod.UID, node); st != nil {
		return st
	}
	v, _ := pl.cache.View(node)
	if v == nil || s.req.GPUs > len(v.C.GPUs) {
		return nil // nothing to plan against: the kubelet decides alone
	}
	if o, ok := s.overlays[node]; ok {
		// A pod-group preemption's what-if: plan as if its victims were
		// gone, as Filter judged (the framework undoes this Reserve).
		v = v.withOverlay(o)
	}
	// Decide: the plan, from the view alone (and, for a job's first pod,
	// the cluster's room on each rail).
	steps := placement.MaxCallSteps
	li := placement.PlanLevel(&v.Node, &s.req, &steps)
	req := s.req
	if req.FollowRails && len(req.JobRails) == 0 {
		// The job's first pod: its rails become the job's, so take those
		// with the most room left for the others.
		req.RailRoom = pl.cache.railRoom(li, req.GPUs)
	}
	plan, ok := placement.PlanAt(&v.Node, &req, li, node)
	if !ok {
		return fwk.NewStatus(fwk.Unschedulable, "the GPUs planned here were taken by another pod in the meantime")
	}
	// Do: hold it, and record it where the next cycles read it.
	pl.cache.Reserve(node, pod.UID, plan.GPUs, plan.VFs)
	alloc := &plan.Allocation
	if s.req.FollowRails {
		// The job's next pods (the next members of a pod-group cycle
		// too) place onto these rails; Unreserve takes them back.
		pl.cache.jobs.add(s.req.Job, pod.UID, pl.cache.countedRails(alloc.Rails))
	}
	s.planned = alloc
	if s.req.RDMA {
		// In a pod-group cycle, what ScorePlacement ranks placements by.
		recordPlacement(cycle, pod.UID, plan.Worst <= s.req.MaxLevel, alloc.Rails)
	}
	if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
		logger.Info("Reserved GPUs", "pod", klog.KObj(pod), "node", node, "gpus", alloc.GPUs, "nics", alloc.NICs, "level", alloc.Level)
	}
	return nil
}

// Unreserve releases what Reserve held.
func (pl *NICAffinity) Unreserve(_ context.Context, cycle fwk.CycleState, pod *v1.Pod, node string) {
	pl.cache.Unreserve(node, pod.UID)
	pl.cache.jobs.drop(pod.UID)
	if s, err := getState(cycle); err == nil && s != nil {
		s.planned = nil
	}
}

// PreBindPreFlight: PreBind has work only when Reserve made a plan and the
// plan is not written by Bind (annotateAt: PreBind).
func (pl *NICAffinity) PreBindPreFlight(_ context.Context, cycle fwk.CycleState, _ *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	s, err := getState(cycle)
	if err != nil || s == nil || s.planned == nil || pl.args.AnnotateAt != AnnotateAtPreBind {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: true}, nil
}

// Bind binds a planned pod with its plan in the Binding's annotations: the
// apiserver copies them onto the pod, so the plan costs no API call of its
// own (a separate patch halves throughput where the scheduler's client is
// rate-limited). Pods without a plan, or annotateAt: PreBind, are left to
// DefaultBinder.
func (pl *NICAffinity) Bind(ctx context.Context, cycle fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	s, err := getState(cycle)
	if err != nil || s == nil || s.planned == nil || pl.args.AnnotateAt != AnnotateAtBind {
		return fwk.NewStatus(fwk.Skip)
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Annotations: map[string]string{annotations.AllocationKey: annotations.Marshal(s.planned)}},
		Target: v1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := pl.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(err)
	}
	pl.countPlacement(s)
	return nil
}

// policyRelaxed labels a bounded pod placed once its wait was over.
const policyRelaxed = "relaxed"

// countPlacement counts a pod bound with its plan written.
func (pl *NICAffinity) countPlacement(s *preFilterState) {
	level, policy := s.planned.Level, annotations.PolicyPreferred
	if level == "" {
		level = "none"
	}
	switch {
	case s.req.Bounded && s.req.Required:
		policy = annotations.PolicyBounded
	case s.req.Bounded:
		policy = policyRelaxed // a bounded pod placed after its wait
	case s.req.Required:
		policy = annotations.PolicyRequired
	}
	pl.cache.metrics.placed(level, policy)
}

// PreBind writes the plan on the pod (nicaffinity.io/allocation), where the
// exporter compares it with what the kubelet really handed out.
func (pl *NICAffinity) PreBind(ctx context.Context, cycle fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	s, err := getState(cycle)
	if err != nil || s == nil || s.planned == nil {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotations.AllocationKey: annotations.Marshal(s.planned)}}})
	if err != nil {
		return fwk.AsStatus(err)
	}
	if _, err := pl.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fwk.AsStatus(err)
	}
	pl.countPlacement(s) // PreBind runs before DefaultBinder binds: a failed bind still counts
	return nil
}
