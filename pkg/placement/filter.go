package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Reasons a node is refused, as the plugin's metric label values.
const (
	ReasonNoAligned   = "no_aligned_gpu"
	ReasonTooFew      = "too_few_aligned_gpus"
	ReasonNoVF        = "no_free_vf"
	ReasonNoGPUDirect = "gpudirect_impossible"
	ReasonRails       = "off_job_rails"
)

// Verdict is the answer for one pod on one node: whether it fits and, when
// not, why, in the words the scheduler's Filter status carries.
type Verdict struct {
	Fits bool
	// Unresolvable: the pod would not fit even with every pod gone from
	// the node (kube-scheduler's UnschedulableAndUnresolvable: preemption
	// cannot help).
	Unresolvable bool
	// Reason is one of the Reason constants; Message what users read
	// (it starts with a word: the scheduler prints "<count> <message>").
	Reason, Message string
}

// Fit decides whether an RDMA pod fits n at its level: some req.GPUs free
// GPUs each with a usable NIC at req.MaxLevel or closer (with free VFs where
// it asks for VFs), and on its job's rails when it must be. Every search
// draws on *steps, the call's budget (MaxCallSteps); past it the node
// counts as not fitting. A pod without RDMA fits where enough GPUs are free.
func Fit(n *Node, req *Request, steps *int) Verdict {
	li := LevelIndex(req.MaxLevel)
	if !n.Feasible(req, li, steps) {
		return Reject(n, req, steps)
	}
	if req.RDMA && req.Rails == annotations.PolicyRequired && !n.RailsFit(req, li) {
		return Verdict{Reason: ReasonRails, Message: fmt.Sprintf("not enough free GPUs at %s or closer on the rails of the pod's job (%s; nicaffinity.io/rails: required)",
			n.C.Shown(topology.Levels[li]), railList(req.JobRails))}
	}
	return Verdict{Fits: true}
}

// Reject is the verdict for a pod known not to fit n at its level (Fit
// found so, or an answer precomputed for the node did): the reason, and
// whether it is unresolvable, within the call's budget *steps.
func Reject(n *Node, req *Request, steps *int) Verdict {
	li := LevelIndex(req.MaxLevel)
	if !req.RDMA {
		return Verdict{Reason: ReasonTooFew, Message: fmt.Sprintf("only %d free GPUs; the pod needs %d", n.Free.Count(), req.GPUs)}
	}
	level := topology.Levels[li]
	free := n.Free.Count()
	near := (n.Free & n.C.AnyNear[li]).Count()
	empty := &Node{C: n.C, Free: n.C.Healthy, VFFree: n.VFFree}
	v := Verdict{}
	// Only pods without VFs can be unresolvable here (VFs free up when
	// pods go), and their check searches nothing.
	if len(req.VFs) == 0 && !empty.Feasible(req, li, steps) {
		v.Unresolvable = true
	}
	cause := BlockedCause(n, level)
	shown := n.C.Shown(level).String() + " or closer"
	if req.NCCL != "" {
		shown += " (the pod's " + req.NCCL + ")"
	}
	switch {
	case len(req.VFs) > 0 && near >= req.GPUs:
		v.Reason = ReasonNoVF
		v.Message = fmt.Sprintf("no free VF of %s on a NIC at %s to %d free GPUs%s", req.VFs[0].Resource, shown, req.GPUs, cause)
	case near == 0:
		v.Reason = ReasonNoAligned
		v.Message = fmt.Sprintf("none of the %d free GPUs has a NIC at %s%s", free, shown, cause)
	default:
		v.Reason = ReasonTooFew
		v.Message = fmt.Sprintf("only %d of the %d free GPUs have a NIC at %s; the pod needs %d%s", near, free, shown, req.GPUs, cause)
	}
	if cause != "" {
		v.Reason = ReasonNoGPUDirect
	}
	return v
}

// BlockedCause names why GPUDirect RDMA cannot run on paths of free GPUs
// whose published level would have been close enough: "; GPUDirect RDMA
// impossible on closer paths: ACS redirect on 0000:14:00.0". Empty when no
// such path exists. Only rejections need it.
func BlockedCause(n *Node, level topology.Level) string {
	var reasons []string
	for g := range n.C.GPUs {
		gpu := &n.C.GPUs[g]
		if n.Free&(1<<g) == 0 || gpu.Blocked == nil {
			continue
		}
		for i, why := range gpu.Blocked {
			if why != "" && gpu.Published[i] <= level && !slices.Contains(reasons, why) {
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

// railList names at most shownRails rails: a rejection's reason is
// written per rejected node and must stay short whatever a job holds.
func railList(rails []string) string {
	const shownRails = 8
	if len(rails) <= shownRails {
		return strings.Join(rails, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(rails[:shownRails], ", "), len(rails)-shownRails)
}
