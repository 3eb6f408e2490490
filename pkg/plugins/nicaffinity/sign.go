package nicaffinity

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// SignerName keys NICAffinity's fragment of a pod's signature.
const SignerName = "nicaffinity.io/request"

// signature is everything of a pod that Filter and Score read: two pods
// with equal signatures get the same answers from the same nodes. The
// resources themselves are also signed by NodeResourcesFit; the VF list is
// sorted (podRequest), so equal requests marshal alike.
type signature struct {
	GPUs     int         `json:"gpus"`
	RDMA     bool        `json:"rdma"`
	VFs      []signedVFs `json:"vfs,omitempty"`
	MaxLevel string      `json:"maxLevel"`
	Required bool        `json:"required"`
	// NCCL is the pod's NCCL environment that set MaxLevel: the same level
	// asked for another way gives other messages.
	NCCL string `json:"nccl,omitempty"`
	// Job is the pod's job: pods of different jobs are ranked apart, so
	// that what one job's pods were given cannot steer another's.
	Job string `json:"job,omitempty"`
}

type signedVFs struct {
	Resource string `json:"resource"`
	Count    int64  `json:"count"`
}

// SignPod signs the pod's request so that the scheduler can batch pods
// that ask alike (opportunistic batching turns off for a whole profile
// when one of its filtering or scoring plugins cannot sign). Pods without
// GPUs sign with no fragment: the plugin skips them. A pod whose
// annotations cannot be read is not signed; PreFilter rejects it.
func (pl *NICAffinity) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	req, ok, err := pl.podRequest(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with an unreadable nicaffinity annotation are not signable: "+err.Error())
	}
	if !ok {
		return nil, nil
	}
	if req.FollowRails {
		// Where this pod goes depends on where its job's other pods went,
		// which changes as they are placed: a ranking made for one of
		// them is no answer for the next.
		return nil, fwk.NewStatus(fwk.Unschedulable, "a pod of a multi-pod job is placed on its job's rails, which change as its pods are placed")
	}
	required := req.Required && (!req.Bounded || !pl.waits.over(pod, req.Job)) // as PreFilter will read it
	sig := signature{GPUs: req.GPUs, RDMA: req.RDMA, MaxLevel: req.MaxLevel.String(), Required: required, NCCL: req.NCCL, Job: req.Job}
	for _, vf := range req.VFs {
		sig.VFs = append(sig.VFs, signedVFs{Resource: vf.Resource, Count: vf.Count})
	}
	return []fwk.SignFragment{{Key: SignerName, Value: sig}}, nil
}
