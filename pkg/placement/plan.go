package placement

import (
	"slices"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Plan is what a pod is to get on a node. The scheduler's Reserve computes
// it here, then applies it (holds its GPUs and VFs, writes its annotation,
// records the job's rails): deciding and doing apart.
type Plan struct {
	GPUs nrt.GPUSet
	// VFs[n][resource] are the VFs the pod takes on NIC n (nil without VFs).
	VFs map[int]map[string]int64
	// Allocation is the plan as the pod's annotation carries it.
	Allocation annotations.Allocation
	// Worst is the worst level of the planned GPUs to their nearest NICs
	// (LevelX for a pod without RDMA).
	Worst topology.Level
}

// PlanLevel is the level index to plan req at on n: the closest at which
// it fits, else the farthest (a preferred pod on a node that cannot align
// it). Searches draw on *steps.
func PlanLevel(n *Node, req *Request, steps *int) int {
	if li := n.BestLevel(req, steps); li >= 0 {
		return li
	}
	return len(topology.Levels) - 1
}

// PlanAt plans req on n, the node named node, at level index li: the GPUs
// (Plan), the NIC each should use (NICsFor), the VFs taken from those NICs
// in order, and the annotation. ok is false when fewer GPUs than the pod
// asks for are left to plan (another pod took them since Filter).
func PlanAt(n *Node, req *Request, li int, node string) (Plan, bool) {
	gpus := n.Plan(req, li)
	if gpus.Count() < req.GPUs {
		return Plan{}, false
	}
	p := Plan{GPUs: gpus, Worst: topology.LevelX}
	nics := n.NICsFor(req, gpus)
	if len(req.VFs) > 0 {
		p.VFs = map[int]map[string]int64{}
	}
	for _, vf := range req.VFs {
		left := vf.Count
		for _, i := range nics {
			if take := min(left, n.VFFree[vf.Resource][i]); take > 0 {
				if p.VFs[i] == nil {
					p.VFs[i] = map[string]int64{}
				}
				p.VFs[i][vf.Resource] += take
				left -= take
			}
		}
	}
	c := n.C
	alloc := annotations.Allocation{Node: node, NRTGeneration: c.Generation,
		GPUs: make([]string, 0, req.GPUs), UUIDs: make([]string, 0, req.GPUs)}
	if len(nics) > 0 {
		alloc.NICs = make([]string, 0, len(nics))
	}
	uuids := true
	for g := range c.GPUs {
		if gpus&(nrt.GPUSet(1)<<g) != 0 {
			alloc.GPUs = append(alloc.GPUs, c.GPUs[g].BusID)
			alloc.UUIDs = append(alloc.UUIDs, c.GPUs[g].UUID)
			uuids = uuids && c.GPUs[g].UUID != ""
			if req.RDMA {
				p.Worst = max(p.Worst, c.BestLevel[g])
			}
		}
	}
	if !uuids {
		alloc.UUIDs = nil // all or none: the object names GPUs by UUID only with NVML
	}
	for _, i := range nics {
		alloc.NICs = append(alloc.NICs, c.NICs[i].Name)
		if r := c.NICs[i].Rail; r != "" && !slices.Contains(alloc.Rails, r) {
			alloc.Rails = append(alloc.Rails, r)
		}
	}
	slices.Sort(alloc.Rails)
	if req.RDMA && p.Worst <= topology.LevelSYS {
		alloc.Level = p.Worst.String()
	}
	p.Allocation = alloc
	return p, true
}
