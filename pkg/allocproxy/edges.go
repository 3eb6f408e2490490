package allocproxy

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
)

// PodPlans reads the candidates from the pods of this node an informer
// holds. A plan that does not parse, or names another node, is no plan.
type PodPlans struct {
	Node   string
	Lister corelisters.PodLister
	// Orders are the pods' binding orders (nil: each pod's current
	// resourceVersion, which its owner can move).
	Orders *BindingOrders
}

// Candidates lists the node's live pods: those with a plan, and the others
// (Unplanned) that request a device.
func (pp PodPlans) Candidates() []Candidate {
	pods, err := pp.Lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []Candidate
	for _, pod := range pods {
		c, ok := CandidateOf(pp.Node, pod)
		if !ok {
			c, ok = unplannedOf(pp.Node, pod)
		}
		if !ok {
			continue
		}
		if pp.Orders != nil {
			c.Order = pp.Orders.of(c.UID, c.Order)
		}
		out = append(out, c)
	}
	return out
}

// unplannedOf reads a live pod of node without a usable plan that requests
// something: another scheduler's pod, which the kubelet may be admitting.
func unplannedOf(node string, pod *corev1.Pod) (Candidate, bool) {
	if !live(node, pod) {
		return Candidate{}, false
	}
	reqs := requests(pod)
	if len(reqs) == 0 {
		return Candidate{}, false
	}
	return Candidate{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Order: order(pod), Created: pod.CreationTimestamp.Time, Requests: reqs,
		SetsIBHCA: setsEnv(pod, EnvIBHCA), Unplanned: true}, true
}

// live: bound to node, not finished or going.
func live(node string, pod *corev1.Pod) bool {
	return pod.Spec.NodeName == node && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// requests is the pod's positive requests by resource name.
func requests(pod *corev1.Pod) map[string]int64 {
	reqs := map[string]int64{}
	for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		if v := q.Value(); v > 0 {
			reqs[string(name)] = v
		}
	}
	return reqs
}

// order is the pod's resourceVersion as an etcd revision (comparable where
// it parses), 0 when it does not.
func order(pod *corev1.Pod) uint64 {
	o, _ := strconv.ParseUint(pod.ResourceVersion, 10, 64)
	return o
}

// CandidateOf reads one pod: bound to node, not finished or going, with a
// plan for node.
func CandidateOf(node string, pod *corev1.Pod) (Candidate, bool) {
	if !live(node, pod) {
		return Candidate{}, false
	}
	v, ok := pod.Annotations[annotations.AllocationKey]
	if !ok {
		return Candidate{}, false
	}
	plan, err := annotations.ParseAllocation(v)
	if err != nil || plan.Node != node {
		klog.V(2).InfoS("Pod's plan is unusable", "pod", klog.KObj(pod), "err", err, "planNode", plan.Node)
		return Candidate{}, false
	}
	return Candidate{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Order: order(pod), Created: pod.CreationTimestamp.Time, Plan: plan, Requests: requests(pod),
		SetsIBHCA: setsEnv(pod, EnvIBHCA)}, true
}

// setsEnv reports whether a container of the pod names env var name in its
// env list.
func setsEnv(pod *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.Name == name {
					return true
				}
			}
		}
	}
	return false
}

// PodResourcesHeld reads which pods hold devices from the kubelet's
// podresources API.
type PodResourcesHeld struct {
	Source podresources.Source
}

// Holding lists the pods (namespace/name) that hold devices of resource.
func (h PodResourcesHeld) Holding(ctx context.Context, resource string) (map[string]bool, error) {
	snap, err := h.Source.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, p := range snap.Pods {
		for _, d := range p.Devices {
			if d.Resource == resource {
				out[p.Namespace+"/"+p.Name] = true
				break
			}
		}
	}
	return out, nil
}
