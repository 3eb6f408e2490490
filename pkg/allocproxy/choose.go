// Package allocproxy sits between the kubelet and a vendor device plugin
// (the NVIDIA device plugin, the SR-IOV network device plugin) and answers
// the kubelet's GetPreferredAllocation with the devices nicaffinity's
// scheduler planned for the pod being admitted.
//
// The kubelet's request names no pod. Choose, the pure core, finds it: the
// oldest pod bound to this node whose plan is not yet realized, whose
// planned size matches the request and whose planned devices are all
// available. The gRPC edges (server.go) and the simulated kubelet both run
// Choose; neither has a copy of it.
package allocproxy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// Kind says how a resource's device IDs relate to a plan.
type Kind int

const (
	// KindGPU: device IDs are GPU UUIDs (the NVIDIA device plugin's default)
	// or PCI bus IDs; the plan names each GPU.
	KindGPU Kind = iota
	// KindVF: device IDs are VF PCI addresses (the SR-IOV network device
	// plugin); the plan names the NICs whose VFs the pod should get.
	KindVF
)

// Candidate is a pod bound to this node that holds none of the resource
// yet: perhaps the pod the kubelet is admitting. Most carry a plan; an
// Unplanned one (another scheduler's pod) is listed too, so that a request
// that is most likely its own is not handed a planned pod's devices.
type Candidate struct {
	Namespace, Name string
	UID             types.UID
	// Order is the pod's resourceVersion as an etcd revision: for a pod
	// bound and not admitted yet, the revision of its binding. The kubelet
	// admits pods in the order their bindings reach it, and pods created
	// in the same second are often bound out of creation order (the
	// scheduler binds in parallel). 0 when unknown.
	Order uint64
	// Created breaks ties and orders candidates without Order.
	Created time.Time
	Plan    annotations.Allocation
	// Requests is the pod's request per resource, from its spec.
	Requests map[string]int64
	// SetsIBHCA is whether a container of the pod sets NCCL_IB_HCA itself
	// (env, literal or not): the proxy then sets none.
	SetsIBHCA bool
	// Unplanned: the pod carries no usable plan (Plan is empty).
	Unplanned bool
}

// Key is namespace/name.
func (c *Candidate) Key() string { return c.Namespace + "/" + c.Name }

// Request is one container's GetPreferredAllocation request.
type Request struct {
	Resource    string
	Kind        Kind
	Available   []string
	MustInclude []string
	Size        int
}

// Reasons a plan is not used, as metric label values.
const (
	ReasonNoPlan       = "no-plan"
	ReasonTaken        = "devices-taken"
	ReasonUnknownIDs   = "unknown-device-ids"
	ReasonMustInclude  = "must-include"
	ReasonVendorFailed = "vendor-failed"
	ReasonBadPlan      = "bad-plan"
)

// Choice is Choose's answer. With IDs, the plan of Pod is followed. Without,
// Reason and Message say why not, and Pod is the pod the request most
// likely is (the oldest candidate of that size), when there is one; an
// Unplanned Pod comes with ReasonNoPlan.
type Choice struct {
	Pod     *Candidate
	IDs     []string
	Reason  string
	Message string
}

// Choose finds the candidate the request is for and its planned device IDs:
// the first bound (Order, else Created) that is unplanned or whose plan
// fits. An unplanned pod first in that order is the likeliest owner of the
// request, so the plans behind it are kept for their own pods.
// vfPF maps a VF's PCI address to the RDMA device name of its PF (KindVF
// only). It never fails: without a usable plan the Choice says why.
func Choose(req Request, cands []Candidate, vfPF map[string]string) Choice {
	ordered := make([]*Candidate, 0, len(cands))
	for i := range cands {
		c := &cands[i]
		if c.Requests[req.Resource] == int64(req.Size) && (c.Unplanned || req.Kind != KindGPU || len(c.Plan.GPUs) == req.Size) {
			ordered = append(ordered, c)
		}
	}
	if len(ordered) == 0 {
		return Choice{Reason: ReasonNoPlan, Message: fmt.Sprintf("no pod on this node with a plan for %d %s", req.Size, req.Resource)}
	}
	sort.SliceStable(ordered, func(i, j int) bool {
		if a, b := ordered[i].Order, ordered[j].Order; a != 0 && b != 0 && a != b {
			return a < b
		}
		if !ordered[i].Created.Equal(ordered[j].Created) {
			return ordered[i].Created.Before(ordered[j].Created)
		}
		return ordered[i].Key() < ordered[j].Key()
	})
	available := make(map[string]bool, len(req.Available))
	for _, id := range req.Available {
		available[id] = true
	}
	var first Choice
	for _, c := range ordered {
		var ch Choice
		if c.Unplanned {
			// Older plans, if any, cannot be followed: this pod's request
			// is likelier, and the vendor then keeps off the plans behind.
			return Choice{Pod: c, Reason: ReasonNoPlan, Message: fmt.Sprintf("%s, bound before any pod whose plan fits, has no plan", c.Key())}
		}
		if req.Kind == KindGPU {
			ch = gpuPlan(req, c, available)
		} else {
			ch = vfPlan(req, c, available, vfPF)
		}
		ch.Pod = c
		if ch.IDs != nil {
			return ch
		}
		if first.Pod == nil {
			first = ch
		}
	}
	return first
}

// gpuPlan maps the planned GPUs to device IDs: the UUID the plan carries
// when the vendor offers it, else the bus ID.
func gpuPlan(req Request, c *Candidate, available map[string]bool) Choice {
	ids := make([]string, 0, len(c.Plan.GPUs))
	var missing, taken []string
	for i, bus := range c.Plan.GPUs {
		id := bus
		if i < len(c.Plan.UUIDs) && c.Plan.UUIDs[i] != "" && available[c.Plan.UUIDs[i]] {
			id = c.Plan.UUIDs[i]
		}
		switch {
		case available[id]:
			ids = append(ids, id)
		case i < len(c.Plan.UUIDs) && c.Plan.UUIDs[i] != "":
			taken = append(taken, bus)
		default:
			missing = append(missing, bus)
		}
	}
	switch {
	case len(taken) > 0:
		return Choice{Reason: ReasonTaken, Message: fmt.Sprintf("planned GPUs %s of %s are not available", strings.Join(taken, ", "), c.Key())}
	case len(missing) > 0:
		return Choice{Reason: ReasonUnknownIDs, Message: fmt.Sprintf("planned GPUs %s of %s match no available %s device (taken, or the plan has no UUIDs and the device plugin does not name GPUs by bus ID)", strings.Join(missing, ", "), c.Key(), req.Resource)}
	}
	// Plans are parsed with repeats refused; a plan's UUID and bus ID may
	// still name one device twice. The kubelet must never get a device
	// twice in one answer.
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return Choice{Reason: ReasonBadPlan, Message: fmt.Sprintf("the plan of %s names device %s twice", c.Key(), id)}
		}
		seen[id] = true
	}
	for _, m := range req.MustInclude {
		if !slices.Contains(ids, m) {
			return Choice{Reason: ReasonMustInclude, Message: fmt.Sprintf("the kubelet must include %s, which %s's plan does not name", m, c.Key())}
		}
	}
	return Choice{IDs: ids}
}

// vfPlan takes Size available VFs of the planned NICs, the ones the kubelet
// must include first.
func vfPlan(req Request, c *Candidate, available map[string]bool, vfPF map[string]string) Choice {
	if len(c.Plan.NICs) == 0 {
		return Choice{Reason: ReasonNoPlan, Message: fmt.Sprintf("%s's plan names no NIC", c.Key())}
	}
	near := func(vf string) bool { return slices.Contains(c.Plan.NICs, vfPF[vf]) }
	var ids []string
	for _, m := range req.MustInclude {
		if !near(m) || !available[m] {
			return Choice{Reason: ReasonMustInclude, Message: fmt.Sprintf("the kubelet must include %s, which is no available VF of %s's planned NICs", m, c.Key())}
		}
		if !slices.Contains(ids, m) {
			ids = append(ids, m)
		}
	}
	if len(ids) > req.Size {
		return Choice{Reason: ReasonMustInclude, Message: fmt.Sprintf("the kubelet must include %d VFs in %d", len(ids), req.Size)}
	}
	free := slices.Clone(req.Available)
	slices.Sort(free)
	for _, vf := range free {
		if len(ids) == req.Size {
			break
		}
		if near(vf) && !slices.Contains(ids, vf) {
			ids = append(ids, vf)
		}
	}
	if len(ids) < req.Size {
		return Choice{Reason: ReasonTaken, Message: fmt.Sprintf("%d of the %d %s VFs %s needs are available on its planned NICs %s", len(ids), req.Size, req.Resource, c.Key(), strings.Join(c.Plan.NICs, ", "))}
	}
	return Choice{IDs: ids}
}

// Unplanned is the available devices a request without a plan may take
// without taking another pod's plan: available less every GPU that a
// candidate's plan names (by UUID or bus ID), the must-includes kept. When
// fewer than Size remain it is all of available: the pod is admitted
// anyway, and the plan it takes is then not followed. VF plans name NICs,
// not VFs, and are left to the vendor. A pod of another scheduler bound
// beside a planned pod would otherwise get the vendor's choice, which may
// be the planned GPUs.
func Unplanned(req Request, cands []Candidate) []string {
	if req.Kind != KindGPU {
		return req.Available
	}
	planned := map[string]bool{}
	for _, c := range cands {
		for _, id := range c.Plan.GPUs {
			planned[id] = true
		}
		for _, id := range c.Plan.UUIDs {
			planned[id] = true
		}
	}
	out := make([]string, 0, len(req.Available))
	for _, id := range req.Available {
		if !planned[id] || slices.Contains(req.MustInclude, id) {
			out = append(out, id)
		}
	}
	if len(out) < req.Size {
		return req.Available
	}
	return out
}
