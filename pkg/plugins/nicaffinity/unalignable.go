package nicaffinity

import (
	"slices"
	"sync/atomic"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Waiting for alignment no node can give.
//
// A bounded pod waits for GPUs at its level, because pods leave and free
// aligned GPUs. When no node could give it that many GPUs at its level even
// with every pod gone (placement.Capacity; for a VF pod, next to NICs that
// offer its VFs at all, next to one of them when it asks for one VF), no departure ends the wait in alignment: the pod
// is placed as preferred at once, instead of waiting out its time first.
// Nodes differ from those that can align only in what they are, not in
// what runs on them, so the answer changes only when a node joins, leaves
// or publishes another shape.
//
// Invariants:
//   - the cache counts views by their capacity (alignCaps, under its mu),
//     changed only when a view's compiled object changes, and publishes the
//     largest capacity per level and resource (capsTable) for PreFilter to
//     read without a lock;
//   - an answer is given only when every node's capacity is known: no view
//     without a usable object (unreadable, stale) and every node of the
//     cycle that has GPUs has a view (covered, skip.go); otherwise the pod
//     waits as before. Unknown is never read as unalignable.
//
// The answer depends on the request and the cluster's shapes only, never on
// a pod's own history, so pods that sign alike (SignPod) get the same one.

// capKey counts views that could align n GPUs at level index li, next to
// NICs offering res ("" any NIC), one of them where one is set.
type capKey struct {
	li  int8
	one bool
	n   int16
	res string
}

// capsOfKey is a table entry's key: a resource, with one NIC or any.
type capsOfKey struct {
	res string
	one bool
}

// alignCaps is the cache's count of views by capacity.
type alignCaps struct {
	counts map[capKey]int
	// unknown counts views without a usable compiled object.
	unknown int
	table   atomic.Pointer[capsTable]
}

// capsTable is the largest capacity over the views, per level index and
// resource; unknown is set while some view's capacity is not known.
type capsTable struct {
	most    [nrt.NumLevels]map[capsOfKey]int
	unknown bool
}

// capsOf are the keys a compiled object counts under.
func capsOf(c *nrt.Compiled) []capKey {
	res := []string{""}
	for _, nic := range c.NICs {
		for r := range nic.VFs {
			if !slices.Contains(res, r) {
				res = append(res, r)
			}
		}
	}
	out := make([]capKey, 0, 2*len(res)*len(topology.Levels))
	for li := range topology.Levels {
		for _, r := range res {
			out = append(out, capKey{li: int8(li), n: int16(placement.Capacity(c, li, r, false)), res: r})
			if r != "" {
				out = append(out, capKey{li: int8(li), one: true, n: int16(placement.Capacity(c, li, r, true)), res: r})
			}
		}
	}
	return out
}

// replace moves a node's counts from its old view to its new one (either
// may be nil: no view). The caller holds the cache's mu.
func (a *alignCaps) replace(old, new *nodeView) {
	var oc, nc *nrt.Compiled
	if old != nil {
		oc = old.C
	}
	if new != nil {
		nc = new.C
	}
	if oc == nc && (old == nil) == (new == nil) {
		return // the same object: the same capacity
	}
	if a.counts == nil {
		a.counts = map[capKey]int{}
	}
	a.count(old, -1)
	a.count(new, 1)
	t := &capsTable{unknown: a.unknown > 0}
	for li := range t.most {
		t.most[li] = map[capsOfKey]int{}
	}
	for k, n := range a.counts {
		if tk := (capsOfKey{k.res, k.one}); n > 0 && int(k.n) > t.most[k.li][tk] {
			t.most[k.li][tk] = int(k.n)
		}
	}
	a.table.Store(t)
}

func (a *alignCaps) count(v *nodeView, d int) {
	switch {
	case v == nil:
	case v.C == nil:
		a.unknown += d
	default:
		for _, k := range capsOf(v.C) {
			if a.counts[k] += d; a.counts[k] == 0 {
				delete(a.counts, k)
			}
		}
	}
}

// unalignable reports whether no node with a view could ever align req (see
// the top of this file); false when that is not known.
func (c *Cache) unalignable(req *request) bool {
	t := c.caps.table.Load()
	if !req.RDMA || t == nil || t.unknown {
		return false
	}
	li := placement.LevelIndex(req.MaxLevel)
	if t.most[li][capsOfKey{}] < req.GPUs {
		return true
	}
	for _, vf := range req.VFs {
		if t.most[li][capsOfKey{vf.Resource, vf.Count == 1}] < req.GPUs {
			return true
		}
	}
	return false
}
