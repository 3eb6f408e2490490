package placement

import (
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Request is what a pod asks of a node, read from the pod once (the plugin
// in PreFilter; kubectl and doctor per call) and, for a job's pod, the
// rails its job holds.
type Request struct {
	GPUs     int
	RDMA     bool
	VFs      []VF
	MaxLevel topology.Level
	Required bool
	// Bounded: the pod waits for aligned GPUs for a bounded time
	// (policy bounded). Placement decides by Required alone, which the
	// scheduler clears once the wait is over; how long it is, and the
	// clock, are the scheduler's.
	Bounded bool
	// NCCL is the pod's NCCL environment that set MaxLevel, for messages.
	NCCL string
	// Job is the pod's job (namespace/name), "" for a job of one.
	Job string
	// Rails is how the pod holds to its job's rails (annotations'
	// PolicyRequired, PolicyPreferred, PolicyIgnore); FollowRails is
	// whether it does at all (a job's RDMA pod that does not ignore them).
	Rails       string
	FollowRails bool
	// JobRails are the rails the job's other pods hold, as the store had
	// them at PreFilter (in a pod-group cycle, the members reserved before
	// this one); nil when none or not followed.
	JobRails []string
	// RailRoom is, for a job's first pod (JobRails empty), the free GPUs
	// next to each rail's NICs over the cluster, which Reserve's plan
	// prefers the largest of, so that the job's next pods find room on
	// the rails its first one takes; nil otherwise.
	RailRoom map[string]int
	// Common: the plugin's default level and policy, no VFs. The
	// scheduler's views carry precomputed answers for such requests.
	Common bool
}

// VF is a request for Count VFs of one SR-IOV resource.
type VF struct {
	Resource string
	Count    int64
}

// FromPod is the Request of a pod as pkg/request read it with cfg; the
// job's rails (JobRails, RailRoom) are the caller's to add.
func FromPod(r podreq.Request, cfg podreq.Config) Request {
	req := Request{GPUs: r.GPUs, RDMA: r.RDMA, MaxLevel: r.MaxLevel, Required: r.Required, Bounded: r.Wait > 0, NCCL: r.NCCL, Job: r.Job.Key(),
		Rails: r.Rails, FollowRails: r.FollowsRails(), Common: r.Defaulted(cfg)}
	for _, vf := range r.VFs {
		req.VFs = append(req.VFs, VF{Resource: vf.Resource, Count: vf.Count})
	}
	return req
}
