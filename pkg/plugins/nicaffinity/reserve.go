package nicaffinity

import (
	"context"
	"encoding/json"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
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
	steps := placement.MaxCallSteps
	li := v.BestLevel(&s.req, &steps)
	if li < 0 {
		li = len(topology.Levels) - 1 // preferred policy on a node that cannot align
	}
	req := s.req
	if req.FollowRails && len(req.JobRails) == 0 {
		// The job's first pod: its rails become the job's, so take those
		// with the most room left for the others.
		req.RailRoom = pl.cache.railRoom(li, req.GPUs)
	}
	gpus := v.Plan(&req, li)
	if gpus.Count() < s.req.GPUs {
		return fwk.NewStatus(fwk.Unschedulable, "the GPUs planned here were taken by another pod in the meantime")
	}
	nics := v.NICsFor(&s.req, gpus)
	var vfs map[int]map[string]int64
	if len(s.req.VFs) > 0 {
		vfs = map[int]map[string]int64{}
	}
	for _, vf := range s.req.VFs {
		left := vf.Count
		for _, n := range nics {
			take := min(left, v.VFFree[vf.Resource][n])
			if take > 0 {
				if vfs[n] == nil {
					vfs[n] = map[string]int64{}
				}
				vfs[n][vf.Resource] += take
				left -= take
			}
		}
	}
	pl.cache.Reserve(node, pod.UID, gpus, vfs)
	alloc := &annotations.Allocation{Node: node, NRTGeneration: v.C.Generation,
		GPUs: make([]string, 0, s.req.GPUs), UUIDs: make([]string, 0, s.req.GPUs)}
	if len(nics) > 0 {
		alloc.NICs = make([]string, 0, len(nics))
	}
	worst := topology.LevelX
	uuids := true
	for g := range v.C.GPUs {
		if gpus&(nrt.GPUSet(1)<<g) != 0 {
			alloc.GPUs = append(alloc.GPUs, v.C.GPUs[g].BusID)
			alloc.UUIDs = append(alloc.UUIDs, v.C.GPUs[g].UUID)
			uuids = uuids && v.C.GPUs[g].UUID != ""
			if s.req.RDMA {
				worst = max(worst, v.C.BestLevel[g])
			}
		}
	}
	if !uuids {
		alloc.UUIDs = nil // all or none: the object names GPUs by UUID only with NVML
	}
	for _, n := range nics {
		alloc.NICs = append(alloc.NICs, v.C.NICs[n].Name)
		if r := v.C.NICs[n].Rail; r != "" && !slices.Contains(alloc.Rails, r) {
			alloc.Rails = append(alloc.Rails, r)
		}
	}
	slices.Sort(alloc.Rails)
	if s.req.FollowRails {
		// The job's next pods (the next members of a pod-group cycle
		// too) place onto these rails; Unreserve takes them back.
		pl.cache.jobs.add(s.req.Job, pod.UID, alloc.Rails)
	}
	if s.req.RDMA && worst <= topology.LevelSYS {
		alloc.Level = worst.String()
	}
	s.planned = alloc
	if s.req.RDMA {
		// In a pod-group cycle, what ScorePlacement ranks placements by.
		recordPlacement(cycle, pod.UID, worst <= s.req.MaxLevel, alloc.Rails)
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

// countPlacement counts a pod bound with its plan written.
func (pl *NICAffinity) countPlacement(s *preFilterState) {
	level, policy := s.planned.Level, annotations.PolicyPreferred
	if level == "" {
		level = "none"
	}
	if s.req.Required {
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
