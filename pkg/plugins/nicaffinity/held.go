package nicaffinity

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// heldCache reads what GPUs a pod holds (its observed annotation, else
// its plan) once per pod version. Preemption's what-ifs (RemovePod,
// AddPod) and a pod group's PreFilter ask it for every victim on every
// node they try, and the annotations are outside data a node's exporter
// writes (docs/security.md): parsing them per what-if cost 17-53 ms a call
// with 225 KB values before the caps. Parsed once, a call costs a lookup
// and a match of at most annotations.MaxDevices addresses against the
// node's GPUs.
//
// Invariants: an entry is the parse of the pod's annotations at
// resourceVersion rv (annotations change only with a new version); at
// most maxHeld entries (past it the cache starts again: a parse more, never
// a wrong answer); entries of deleted pods are dropped (forget).
type heldCache struct {
	mu sync.Mutex
	by map[types.UID]heldEntry
}

type heldEntry struct {
	rv string
	// node is the plan's node ("" for an observation, which only the
	// pod's node's exporter can write); addrs are normalized bus IDs.
	node  string
	addrs []string
	// observed: addrs are the exporter's observation, not a plan.
	observed bool
}

const maxHeld = 200_000

func newHeldCache() *heldCache { return &heldCache{by: map[types.UID]heldEntry{}} }

// gpus are the GPUs of c a pod holds on node: those the exporter observed
// it holding, else those of its plan. A pod with neither (placed by
// another scheduler and not yet observed) holds GPUs nobody can name: none
// are counted, so preemption never counts on them.
func (h *heldCache) gpus(c *nrt.Compiled, pod *v1.Pod, node string) nrt.GPUSet {
	e := h.entry(pod)
	if e.node != "" && e.node != node {
		return 0
	}
	return e.on(c)
}

// observedGPUs are the GPUs of c the exporter observed the pod holding
// (none without a readable observation). h may be nil (a parse then).
func (h *heldCache) observedGPUs(c *nrt.Compiled, pod *v1.Pod) nrt.GPUSet {
	var e heldEntry
	if h == nil {
		e = parseHeld(pod)
	} else {
		e = h.entry(pod)
	}
	if !e.observed {
		return 0
	}
	return e.on(c)
}

// on is the set of c's GPUs at the entry's addresses.
func (e heldEntry) on(c *nrt.Compiled) nrt.GPUSet {
	var set nrt.GPUSet
	for _, addr := range e.addrs {
		for g := range c.GPUs {
			if c.GPUs[g].BusID == addr {
				set |= 1 << g
			}
		}
	}
	return set
}

func (h *heldCache) entry(pod *v1.Pod) heldEntry {
	h.mu.Lock()
	e, ok := h.by[pod.UID]
	h.mu.Unlock()
	if ok && e.rv == pod.ResourceVersion && pod.ResourceVersion != "" {
		return e
	}
	e = parseHeld(pod)
	h.mu.Lock()
	if len(h.by) >= maxHeld {
		h.by = map[types.UID]heldEntry{}
	}
	h.by[pod.UID] = e
	h.mu.Unlock()
	return e
}

// forget drops a deleted pod's entry.
func (h *heldCache) forget(uid types.UID) {
	h.mu.Lock()
	delete(h.by, uid)
	h.mu.Unlock()
}

// parseHeld reads the pod's observed GPUs, else its plan's, as normalized
// bus IDs (those that do not normalize are left out).
func parseHeld(pod *v1.Pod) heldEntry {
	e := heldEntry{rv: pod.ResourceVersion}
	var ids []string
	if s, ok := pod.Annotations[annotations.ObservedKey]; ok {
		if o, err := annotations.ParseObserved(s); err == nil {
			for _, g := range o.GPUs {
				ids = append(ids, g.BusID)
			}
			e.observed = ids != nil
		}
	}
	if ids == nil {
		if s, ok := pod.Annotations[annotations.AllocationKey]; ok {
			if p, err := annotations.ParseAllocation(s); err == nil {
				ids, e.node = p.GPUs, p.Node
				if e.node == "" {
					ids = nil // a plan for no node holds nothing anywhere
				}
			}
		}
	}
	for _, id := range ids {
		if addr, err := topology.NormalizeBusID(id); err == nil {
			e.addrs = append(e.addrs, addr)
		}
	}
	return e
}
